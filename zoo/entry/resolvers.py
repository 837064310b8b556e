"""OmegaConf resolvers used by the YAML configs; registered when zoo.entry is imported."""

from __future__ import annotations

import netrc
import os
import uuid
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from zoo.entry.run_lock import fresh_run_dir


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


def resolve_ckpt_path(cfg: DictConfig, overrides: list[str] | None = None) -> str | None:
    """The checkpoint a run resumes from, checked before anything is built: the file given; for `last` / auto_resume
    the newest good one of this start's own run (zoo.entry.resume) or of hydra.run.dir; else a good one already in
    the run's directory. `overrides`: this start's (default: Hydra's). A finished run raises RunFinished."""
    from hydra.core.hydra_config import HydraConfig
    from lightning.pytorch.utilities import rank_zero_info

    from zoo.entry.resume import RunFinished, find_run, finished, others_note, recorded_value, several_runs_message

    ckpt_path = cfg.get("ckpt_path")
    if ckpt_path is not None and ckpt_path != "last":
        from zoo.checkpointing.reading import check_checkpoint_file

        check_checkpoint_file(ckpt_path)
        return str(ckpt_path)
    own = Path(cfg.paths.output_dir)
    from zoo.checkpointing.choosing import checkpoint_files, choose_checkpoint  # torch: only when a run starts

    chosen, step, skipped = choose_checkpoint(checkpoint_files(own))
    resuming = ckpt_path == "last" or bool(cfg.get("auto_resume"))
    how = "ckpt_path=last" if ckpt_path == "last" else "auto_resume"
    runs_root = Path(cfg.paths.log_dir) / cfg.task_name / "runs"
    others, among_runs = "", own.resolve().parent == runs_root.resolve()  # else a directory hydra.run.dir named
    if resuming and among_runs:
        if overrides is None:
            overrides = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
        decision = find_run(runs_root, overrides)
        # Runs of these overrides with nothing usable: their checkpoints are named as passed over.
        skipped += [s for m in decision.matching if m.checkpoint is None and m.run != own for s in m.skipped]
        if chosen is None and decision.ambiguous:
            raise ValueError(several_runs_message(how, cfg.task_name, decision.ambiguous))
        if chosen is None and decision.chosen is not None:  # it appeared after this start chose its directory
            raise ValueError(
                f"{how}: run {decision.chosen.run} was started with these overrides, but this start was given "
                f"{own}; continue it with hydra.run.dir={decision.chosen.run}"
            )
        others = others_note(decision.others)
    passed_over = f"; skipped: {'; '.join(skipped)}" if skipped else ""
    if chosen is None:
        if ckpt_path == "last" and not among_runs:
            raise ValueError(
                f"ckpt_path=last: hydra.run.dir={own} holds no usable checkpoint{passed_over}; give the directory "
                "of a run that left one, or ckpt_path=<a checkpoint file>"
            )
        if ckpt_path == "last":
            where = f"{cfg.paths.log_dir}/{cfg.task_name}/runs"
            raise ValueError(
                f"ckpt_path=last: no earlier run of task '{cfg.task_name}' under {where} started with these overrides "
                f"left a usable checkpoint{others}{passed_over}; start without ckpt_path, or give ckpt_path=<a "
                "checkpoint file> or hydra.run.dir=<a run directory>"
            )
        if skipped or others:
            rank_zero_info(
                f"{how}: no earlier run of task '{cfg.task_name}' started with these overrides left a usable "
                f"checkpoint, training from the start in {own}{others}{passed_over}; to continue another run, give "
                "hydra.run.dir=<its directory>"
            )
        return None
    if resuming:
        reason = finished(own, chosen, step, cfg)
        if reason is not None:
            more = cfg.trainer.get("max_steps") if "trainer" in cfg else None
            further = (
                f"raise trainer.max_steps above {step}"
                if isinstance(more, int) and more > 0
                else f"continue it with hydra.run.dir={own} (without {how}) and more trainer.max_epochs"
            )
            message = f"run {own} is finished at step {step} ({reason}); to train it further, {further}"
            if ckpt_path == "last":
                raise ValueError(f"ckpt_path=last: {message}, or start a new run without ckpt_path")
            raise RunFinished(
                f"auto_resume: {message}; nothing was started and the run is left as it is",
                recorded_value(own, cfg.get("optimized_metric")),
            )
    rank_zero_info(f"checkpoint chosen: {chosen} (step {step}){passed_over}")
    return str(chosen)


def run_dir(runs_root: str, fresh_name: str, ckpt_path, auto_resume, overrides=()) -> str:
    """The output directory of a run: with ckpt_path=last or auto_resume, this start's own earlier run (find_run),
    continued in place; else (and when several or none fit: resolve_ckpt_path says why) a fresh one."""
    if ckpt_path == "last" or auto_resume:
        from zoo.entry.resume import find_run

        chosen = find_run(runs_root, list(overrides or ())).chosen
        if chosen is not None:
            return str(chosen.run)
    return fresh_run_dir(runs_root, fresh_name)


def wandb_run_id(output_dir: str) -> str:
    """One wandb run per output directory, its id kept there: a resumed run (and every DDP rank) logs into the same
    wandb run, each multirun job into its own."""
    path = Path(output_dir) / "wandb_run_id"
    if path.is_file():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    run_id = uuid.uuid4().hex[:12]
    path.write_text(run_id)
    return run_id


def register() -> None:
    # zoo.start_dir: the directory the command was started from (hydra.job.chdir=false); unlike
    # ${hydra:runtime.cwd} it also resolves while a sweeper computes hydra.sweep.dir, before any HydraConfig exists.
    # zoo.sweep_dir: a multirun's directory, claimed like a fresh run's; cached, since Hydra copies resolved values
    # into every job's config, so that all jobs of the sweep land in the one directory claimed.
    for name, fn, cache in (
        ("zoo.start_dir", os.getcwd, False),
        ("zoo.wandb_offline", wandb_offline, False),
        ("zoo.run_dir", run_dir, False),
        ("zoo.wandb_run_id", wandb_run_id, False),
        ("zoo.sweep_dir", fresh_run_dir, True),
    ):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn, use_cache=cache)
