"""One run, one directory, one writer.

Runs started in the same second (a job array) would share its name: a fresh run claims its directory with an
exclusive `mkdir`, taking the next free name (`<second>`, `<second>-1`, ...). The processes of one multi-process job
share one directory, named after the launcher's job id, or, under torchrun without one, claimed by rank 0 and passed
through torchrun's store. A run locks its directory while it runs (an `flock` on the directory itself, released by
the kernel however the process ends), so that two processes never write one run.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
from datetime import timedelta
from pathlib import Path

_claimed: dict[tuple[str, str], Path] = {}  # by (runs_root, name): a config resolved twice gets the same one
_created_parents: list[Path] = []  # the folders above them that the claims created (logs/, logs/train/, ...)
_locks: dict[Path, int] = {}


def _launcher_job_id() -> str | None:
    """The id that every process of one multi-process job shares, or None for a single-process run."""
    processes = int(os.environ.get("WORLD_SIZE") or os.environ.get("SLURM_NTASKS") or 1)
    if processes <= 1:
        return None
    if os.environ.get("SLURM_JOB_ID"):
        array_task = os.environ.get("SLURM_ARRAY_TASK_ID")
        return f"slurm-{os.environ['SLURM_JOB_ID']}" + (f"_{array_task}" if array_task else "")
    run_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if run_id and run_id != "none":
        return f"torchrun-{run_id}"
    return None


def _torchrun_store():
    """torchrun's own key-value store (the agent's, which its workers join as clients), or None elsewhere."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    from torch.distributed import TCPStore

    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    return TCPStore(host, port, is_master=False, timeout=timedelta(seconds=600))


def fresh_run_dir(runs_root: str, fresh_name: str) -> str:
    """A directory under `runs_root` that no other run uses: `fresh_name` or the first free `fresh_name-N`, shared by
    the processes of one job (each node composes its own `${now}`, seconds apart)."""
    job_id = _launcher_job_id()
    if job_id is not None:  # every process of the job computes the same name, whenever it starts
        return f"{runs_root}/{job_id}"
    store = _torchrun_store() if int(os.environ.get("WORLD_SIZE") or 1) > 1 else None
    if store is not None:
        key = f"zoo/run_dir/{runs_root}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
        if int(os.environ.get("RANK", "0")) != 0:
            return store.get(key).decode()  # waits until rank 0 has set it
        claimed = _claim(runs_root, fresh_name)
        store.set(key, claimed)
        return claimed
    return _claim(runs_root, fresh_name)


def _claim(runs_root: str, fresh_name: str) -> str:
    key = (runs_root, fresh_name)
    if key in _claimed:
        return str(_claimed[key])
    root = Path(runs_root)
    missing = [p for p in (root, *root.parents) if not p.exists()]
    root.mkdir(parents=True, exist_ok=True)
    _created_parents.extend(missing)
    candidate, n = root / fresh_name, 0
    while True:
        try:
            candidate.mkdir()
            break
        except FileExistsError:
            n += 1
            candidate = root / f"{fresh_name}-{n}"
    _claimed[key] = candidate
    return str(candidate)


def _remove_if_empty(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.rmdir()  # only an empty directory: a run that wrote anything keeps it


@atexit.register
def _release_unused_claims() -> None:
    """A directory claimed and left empty (a refused start, a multirun that resolved the single-run directory too)
    goes at exit, with the folders created to hold it."""
    for path in [*_claimed.values(), *sorted(_created_parents, key=lambda p: len(p.parts), reverse=True)]:
        _remove_if_empty(path)


def remove_if_unused(run_dir: str | Path) -> None:
    """After a start that failed: its directory goes if left empty, and only if this process held it."""
    path = Path(run_dir).resolve()
    if path in _locks:
        _remove_if_empty(path)


def lock_run_dir(run_dir: str | Path) -> None:
    """Hold an exclusive lock on `run_dir` until this process ends; a one-line error if another process holds it."""
    path = Path(run_dir).resolve()
    if path in _locks:
        return
    path.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ValueError(
            f"run directory {path} is in use by another running process; wait for it to end, or start this run "
            "in a directory of its own (without ckpt_path=last / auto_resume, or with another hydra.run.dir)"
        ) from None
    _locks[path] = fd  # kept open (and so locked) for the life of the process


def unlock_run_dir(run_dir: str | Path) -> None:
    fd = _locks.pop(Path(run_dir).resolve(), None)
    if fd is not None:
        os.close(fd)
