"""Choosing the checkpoint a run resumes from: the newest that made progress, is complete and matches its checksum,
naming each one passed over and why."""

from __future__ import annotations

from pathlib import Path


def checkpoint_files(run_dir: str | Path) -> list[Path]:
    """A run's checkpoints (last.ckpt, on_exception.ckpt, the top-k step_*.ckpt), newest first."""
    directory = Path(run_dir) / "checkpoints"
    if not directory.is_dir():
        return []
    return sorted(directory.glob("*.ckpt"), key=lambda p: p.stat().st_mtime, reverse=True)


def _usable(path: Path) -> tuple[int | None, str]:
    """(global step, "") for a checkpoint a run can resume from, else (None, why not)."""
    from .reading import check_checkpoint_file  # torch: only when a run starts, not at config time

    try:
        step = check_checkpoint_file(path)
    except (ValueError, FileNotFoundError) as error:
        reason = str(error).removeprefix(f"{path}").lstrip(": ")
        return None, " ".join(reason.split())
    if step <= 0:
        return None, "no progress (step 0: a run that failed at its start)"
    return step, ""


def choose_checkpoint(candidates: list[Path]) -> tuple[Path | None, int, list[str]]:
    """(the first usable of `candidates` or None, its step, "<path> (why)" for each one passed over before it)."""
    skipped = []
    for path in candidates:
        step, why = _usable(path)
        if step is not None:
            return path, step, skipped
        skipped.append(f"{path} ({why})")
    return None, 0, skipped


def newest_checkpoint(run_dir: str | Path) -> Path | None:
    return choose_checkpoint(checkpoint_files(run_dir))[0]
