"""OmegaConf resolvers used by the YAML configs; registered when zoo.entry is imported."""

from __future__ import annotations

import netrc
import os
import uuid
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

RESUMABLE = ("last.ckpt", "on_exception.ckpt")


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


def newest_checkpoint(run_dir: str | Path) -> Path | None:
    """The most recent of a run's resumable checkpoints (last.ckpt, or on_exception.ckpt after a crash)."""
    found = [p for p in (Path(run_dir) / "checkpoints" / name for name in RESUMABLE) if p.is_file()]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def resolve_ckpt_path(cfg: DictConfig) -> str | None:
    from zoo.tasks.checkpoint import check_checkpoint_file  # torch: only when a run starts, not at config time

    """`last` / auto_resume: the newest checkpoint of this run's directory (hydra.run.dir already points at the
    run being resumed); a file path: checked before anything is built or written."""
    ckpt_path = cfg.get("ckpt_path")
    if ckpt_path == "last" or (ckpt_path is None and cfg.get("auto_resume")):
        found = newest_checkpoint(cfg.paths.output_dir)
        if found is None and ckpt_path == "last":
            raise ValueError(
                f"ckpt_path=last: no earlier run of task '{cfg.task_name}' under {cfg.paths.log_dir} left a "
                "checkpoint; start without ckpt_path, or give a checkpoint file"
            )
        return None if found is None else str(found)
    if ckpt_path is not None:
        check_checkpoint_file(ckpt_path)
    return ckpt_path


def run_dir(runs_root: str, fresh_name: str, ckpt_path, auto_resume) -> str:
    """The output directory of a run: a fresh one, or, with ckpt_path=last or auto_resume, the newest earlier run
    of the same task that left a checkpoint, so that the resumed run continues in place."""
    if ckpt_path == "last" or auto_resume:
        root = Path(runs_root)
        earlier = sorted(d for d in root.glob("*") if d.is_dir() and newest_checkpoint(d)) if root.is_dir() else []
        if earlier:
            return str(earlier[-1])
        # Nothing to resume: a fresh directory; train.py then stops with a one-line error for ckpt_path=last.
    return f"{runs_root}/{fresh_name}"


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
