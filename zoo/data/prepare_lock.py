"""One process prepares a cache, the others wait for it and read what it made.

Under DDP every process builds its DataModule and reads the tokenizer before the trainer exists (the model's
vocabulary comes from the data), so Lightning's `prepare_data` hook, which runs on one rank before a barrier, comes
too late: processes started together (torchrun, srun) would all tokenize the same corpus at once. An exclusive lock
on a file beside the cache serialises them instead: the first makes the cache, the others block, then find it
complete and only read it. The lock lives with the cache, so there is one preparation per file system: per node
when each node has its own cache folder, per job when the folder is shared.

A process that dies holding the lock loses it with its life (the kernel drops flock locks), and what it left is
never taken as complete: every cache writes its marker file last.

`refuse_if_locked` is the other use of such a lock: a folder that one process at a time writes into, where a second
one is a mistake (two `zoo-prepare` runs with one prepare.output_dir) and is refused at once instead of waiting.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no flock; every process then prepares, and atomic writes keep readers safe
    fcntl = None

log = logging.getLogger(__name__)


def prepare_once(marker: Path, make: Callable[[], None], *, what: str) -> bool:
    """Run `make` (which writes `marker` last) unless `marker` exists, holding the lock of its folder while it
    runs; a process that finds the lock taken waits for it. Returns whether this process made the cache."""
    if marker.exists():
        return False
    marker.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file(marker), "a") as handle:
        if fcntl is not None:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                log.info(f"waiting for another process to prepare {what} in {marker.parent}")
                fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            if marker.exists():  # made while this process waited
                return False
            log.info(f"preparing {what} in {marker.parent} (process {os.getpid()})")
            make()
            if not marker.exists():
                raise RuntimeError(f"preparing {what} did not write {marker}")  # a bug of the caller, not of data
            return True
        finally:
            if fcntl is not None:
                fcntl.flock(handle, fcntl.LOCK_UN)


def lock_file(marker: Path) -> Path:
    """The file whose lock is held while the cache that `marker` completes is made."""
    return marker.parent / f".{marker.name}.lock"


@contextlib.contextmanager
def refuse_if_locked(lock: Path, refusal: Callable[[str], str]) -> Iterator[None]:
    """Hold an exclusive lock on the file `lock` while the block runs; when another process holds it, raise at once
    a ValueError with `refusal(holder)`, `holder` naming that process ("process 1234") as far as the lock file
    tells. The file is left in place (removing a lock file races with the next process to open it)."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a+") as handle:
        if fcntl is not None:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                pid = handle.read().strip()
                raise ValueError(refusal(f"process {pid}" if pid.isdigit() else "another process")) from None
        try:
            handle.truncate(0)  # who holds it, for the message of a process refused
            handle.write(str(os.getpid()))
            handle.flush()
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(handle, fcntl.LOCK_UN)
