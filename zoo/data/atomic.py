"""Writing files so that a reader never sees half a file: the one way zoo replaces a file (caches, downloads, token
shards, checkpoints, documents)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def temp_beside(path: Path) -> Path:
    """The private file a write of `path` goes to first: beside it (so the rename is atomic), named after the
    process, with `path`'s suffix (np.save and np.savez add theirs otherwise)."""
    return path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")


@contextmanager
def replacing(path: Path, *, temp: Path | None = None, durable: bool = False) -> Iterator[Path]:
    """Yield a temporary path to write; when the block ends, it replaces `path` in one rename. A block that raises
    leaves `path` as it was and no temporary file. `durable`: fsync the file and its directory (checkpoints)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp or temp_beside(path)
    try:
        yield tmp
        if durable:
            _fsync(tmp, os.O_RDONLY)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    if durable:
        _fsync(path.parent, os.O_RDONLY)


def _fsync(path: Path, flags: int) -> None:
    try:
        fd = os.open(path, flags)
    except OSError:  # a directory cannot be opened on Windows; the rename is what matters there
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes | str) -> None:
    """Replace `path` with `data` (text as UTF-8) in one rename."""
    with replacing(path) as tmp:
        if isinstance(data, str):
            tmp.write_text(data, encoding="utf-8")
        else:
            tmp.write_bytes(data)
