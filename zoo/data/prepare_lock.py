"""One process prepares a cache, the others wait for it and read what it made.

Under DDP every process reads the tokenizer before the trainer exists (the model's vocabulary comes from the data),
so Lightning's `prepare_data` hook comes too late: processes started together would all tokenize the same corpus.
An exclusive flock on a file beside the cache serialises them: the first makes the cache, the others wait, then find
it complete. A process that dies loses its lock, and every cache writes its marker file last, so what it left is
never taken as complete. `refuse_if_locked`: a folder that one process at a time writes into (zoo-prepare's
output), where a second one is refused at once instead of waiting.
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
    a ValueError with `refusal(holder)` ("process 1234"). The file is left in place (removing it would race)."""
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
