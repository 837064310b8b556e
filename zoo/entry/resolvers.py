"""OmegaConf resolvers used by the YAML configs; registered when zoo.entry is imported."""

from __future__ import annotations

import netrc
import os
import uuid
from pathlib import Path

from omegaconf import DictConfig, OmegaConf


def wandb_offline() -> bool:
    """True unless an API key is available (WANDB_API_KEY or a `wandb login` entry in ~/.netrc), so that runs
    without credentials log to a local offline run instead of stopping at a login prompt."""
    if os.environ.get("WANDB_MODE") in ("offline", "disabled"):
        return True
    if os.environ.get("WANDB_API_KEY"):
        return False
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is None
    except (FileNotFoundError, netrc.NetrcParseError):
        return True


def checkpoint_files(run_dir: str | Path) -> list[Path]:
    """A run's checkpoints (last.ckpt, on_exception.ckpt, the top-k step_*.ckpt), newest first."""
    directory = Path(run_dir) / "checkpoints"
    if not directory.is_dir():
        return []
    return sorted(directory.glob("*.ckpt"), key=lambda p: p.stat().st_mtime, reverse=True)


def _usable(path: Path) -> tuple[int | None, str]:
    """(global step, "") for a checkpoint a run can resume from, else (None, why not)."""
    from zoo.checkpointing.reading import check_checkpoint_file  # torch: only when a run starts, not at config time

    try:
        step = check_checkpoint_file(path)
    except (ValueError, FileNotFoundError) as error:
        reason = str(error).removeprefix(f"{path}").lstrip(": ")
        return None, " ".join(reason.split())
    if step <= 0:
        return None, "no progress (step 0: a run that failed at its start)"
    return step, ""


def choose_checkpoint(candidates: list[Path]) -> tuple[Path | None, int, list[str]]:
    """The first of `candidates` that made progress, is complete and matches its checksum; returns (path or None,
    its step, "<path> (why)" for each one passed over before it)."""
    skipped = []
    for path in candidates:
        step, why = _usable(path)
        if step is not None:
            return path, step, skipped
        skipped.append(f"{path} ({why})")
    return None, 0, skipped


def _newest_first(run_dirs: list[Path]) -> list[Path]:
    files = [f for d in run_dirs for f in checkpoint_files(d)]
    return sorted(files, key=lambda p: p.stat().st_mtime, reverse=True)


def _task_runs(runs_root: str | Path) -> list[Path]:
    root = Path(runs_root)
    return sorted(d for d in root.iterdir() if d.is_dir()) if root.is_dir() else []


def newest_checkpoint(run_dir: str | Path) -> Path | None:
    """The checkpoint a run resumes from in `run_dir`: the newest one that made progress and is intact."""
    return choose_checkpoint(checkpoint_files(run_dir))[0]


def resolve_ckpt_path(cfg: DictConfig) -> str | None:
    """The checkpoint a run resumes from, checked before anything is built or written.

    A file path: it must be complete, hold only weights and match its checksum. `last` / auto_resume: the newest
    good checkpoint among the task's runs (the one run_dir placed this run in), or, when hydra.run.dir names a
    directory outside them, that directory's first. No ckpt_path: a good checkpoint already in this run's directory
    (the run continues it, as Lightning would). Checkpoints passed over are named with the reason, in one line."""
    from lightning.pytorch.utilities import rank_zero_info

    ckpt_path = cfg.get("ckpt_path")
    if ckpt_path is not None and ckpt_path != "last":
        from zoo.checkpointing.reading import check_checkpoint_file

        check_checkpoint_file(ckpt_path)
        return str(ckpt_path)
    own = Path(cfg.paths.output_dir)
    if ckpt_path == "last" or cfg.get("auto_resume"):
        runs = _task_runs(Path(cfg.paths.log_dir) / cfg.task_name / "runs")
        if any(d.resolve() == own.resolve() for d in runs):
            candidates = _newest_first(runs)
        else:
            candidates = [*checkpoint_files(own), *_newest_first(runs)]
    else:
        candidates = checkpoint_files(own)
    chosen, step, skipped = choose_checkpoint(candidates)
    passed_over = f"; skipped: {'; '.join(skipped)}" if skipped else ""
    if chosen is None:
        if ckpt_path == "last":
            where = f"{cfg.paths.log_dir}/{cfg.task_name}/runs"
            raise ValueError(
                f"ckpt_path=last: no earlier run of task '{cfg.task_name}' under {where} left a usable checkpoint"
                f"{passed_over}; start without ckpt_path, or give a checkpoint file"
            )
        if skipped:
            rank_zero_info(f"no usable checkpoint to resume from, training from the start{passed_over}")
        return None
    rank_zero_info(f"checkpoint chosen: {chosen} (step {step}){passed_over}")
    return str(chosen)


def run_dir(runs_root: str, fresh_name: str, ckpt_path, auto_resume) -> str:
    """The output directory of a run: a fresh one, or, with ckpt_path=last or auto_resume, the earlier run of the
    same task that holds the newest usable checkpoint (see resolve_ckpt_path), so the resumed run continues in
    place (train.py then locks it: see zoo.entry.run_lock)."""
    if ckpt_path == "last" or auto_resume:
        chosen = choose_checkpoint(_newest_first(_task_runs(runs_root)))[0]
        if chosen is not None:
            return str(chosen.parent.parent)
        # Nothing to resume: a fresh directory; train.py then stops with a one-line error for ckpt_path=last.
    from zoo.entry.run_lock import fresh_run_dir

    return fresh_run_dir(runs_root, fresh_name)


def sweep_dir(multiruns_root: str, fresh_name: str) -> str:
    """The directory of a multirun: claimed like a fresh run's (see zoo.entry.run_lock), so that two sweeps started
    in the same second never share one. Registered with a cache: Hydra copies resolved values into every job's
    config (also to the launcher's worker processes), so all jobs of the sweep land in the one directory claimed."""
    from zoo.entry.run_lock import fresh_run_dir

    return fresh_run_dir(multiruns_root, fresh_name)


def wandb_run_id(output_dir: str) -> str:
    """One wandb run per output directory: the id is kept in the directory, so a resumed run (and every DDP rank)
    logs into the same wandb run, while each multirun job gets its own."""
    path = Path(output_dir) / "wandb_run_id"
    if path.is_file():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    run_id = uuid.uuid4().hex[:12]
    path.write_text(run_id)
    return run_id


def start_dir() -> str:
    """The directory the command was started from. Hydra does not change into the run directory
    (hydra.job.chdir=false), and unlike `${hydra:runtime.cwd}` this also resolves while a multirun sweeper computes
    `hydra.sweep.dir`, before any job (and so any HydraConfig) exists."""
    return os.getcwd()


def register() -> None:
    for name, fn in {
        "zoo.start_dir": start_dir,
        "zoo.wandb_offline": wandb_offline,
        "zoo.run_dir": run_dir,
        "zoo.wandb_run_id": wandb_run_id,
    }.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
    if not OmegaConf.has_resolver("zoo.sweep_dir"):
        OmegaConf.register_new_resolver("zoo.sweep_dir", sweep_dir, use_cache=True)
