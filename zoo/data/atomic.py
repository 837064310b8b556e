"""Writing cache files so that a reader never sees half a file."""

from __future__ import annotations

import os
from pathlib import Path


def atomic_write(path: Path, data: bytes | str) -> None:
    """Concurrent processes (DDP ranks) may build the same cache: each writes a private file and renames it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    if isinstance(data, str):
        tmp.write_text(data, encoding="utf-8")
    else:
        tmp.write_bytes(data)
    os.replace(tmp, path)
