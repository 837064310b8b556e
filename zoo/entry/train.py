"""Build everything from the composed Hydra config and train."""

from __future__ import annotations

import json
import shlex
import sys
from datetime import datetime
from pathlib import Path

import hydra
import lightning as L
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.callbacks import Checkpoint, ModelSummary
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig, OmegaConf

from zoo.callbacks.phase_times import PhaseTimes, mark_job_start
from zoo.callbacks.preemption import PreemptionCheckpoint
from zoo.checkpointing.choosing import newest_checkpoint
from zoo.checkpointing.reading import check_resume
from zoo.entry import hydra_ddp
from zoo.entry.allocator import keep_freed_memory
from zoo.entry.builders import build_callbacks, build_loggers, build_model_config, resumed_configs, task_inputs
from zoo.entry.config_checks import check_config
from zoo.entry.quiet import quiet, start_run_log
from zoo.entry.records import run_record
from zoo.entry.resolvers import resolve_ckpt_path
from zoo.entry.resume import RunFinished, record_launcher
from zoo.entry.run_lock import lock_run_dir, remove_if_unused, unlock_run_dir

# What a shell reports for a process ended by SIGTERM / Ctrl-C: a scheduler sees that the job stopped, not finished.
SIGTERM_EXIT = 143
CTRL_C_EXIT = 130


def train(cfg: DictConfig) -> float | None:
    """Fit, then validate/test with the final weights; returns `cfg.optimized_metric` for sweepers."""
    mark_job_start()  # a later job of a multirun counts its start-up from here
    quiet()
    loggers: list = []
    try:
        return _train(cfg, loggers)
    except BaseException:
        remove_if_unused(cfg.paths.output_dir)  # a start that failed before writing leaves no empty directory
        raise
    finally:
        _finish_wandb(loggers)  # one wandb run per multirun job, never one merged run
        unlock_run_dir(cfg.paths.output_dir)


def _train(cfg: DictConfig, loggers: list) -> float | None:
    if rank_zero_only.rank == 0:  # the other ranks of a job write into the directory rank 0 holds
        lock_run_dir(cfg.paths.output_dir)
    check_config(cfg)
    try:
        ckpt_path = resolve_ckpt_path(cfg)
    except RunFinished as done:  # auto_resume of a finished run: say so, start nothing, write nothing
        rank_zero_info(str(done))
        return done.value
    if cfg.get("seed") is not None:
        L.seed_everything(cfg.seed, workers=True)
    hydra_ddp.install()
    keep_freed_memory()  # no page faults for re-allocated activations at every step

    # A resumed run's network comes from its checkpoint, never again from model.pretrained (resumed_configs).
    data_cfg, model_cfg, given = resumed_configs(cfg, ckpt_path) if ckpt_path else (cfg.data, cfg.model, {})
    # _convert_="all": plain containers reach the objects (and their checkpoints, which load with weights_only=True).
    datamodule = hydra.utils.instantiate(data_cfg, _convert_="all")
    net = hydra.utils.instantiate(build_model_config(model_cfg.net, datamodule), _convert_="all")
    if cfg.get("measure") is not None:
        # A job that measures the built model instead of training it (the lab): returns (metrics, record).
        datamodule.setup("fit")
        start_run(cfg)
        return _result(cfg, *hydra.utils.instantiate(cfg.measure, net=net, datamodule=datamodule, _convert_="all"))
    task = hydra.utils.instantiate(model_cfg, net=net, **task_inputs(datamodule), _convert_="all")
    task.hparams.update(given)  # what the run was given (e.g. the pretrained model it started from), as recorded
    net = task.net  # a task that starts from a pretrained model builds its own network
    loggers += build_loggers(cfg.get("logger"))
    callbacks = build_callbacks(cfg.get("callbacks"), has_logger=bool(loggers))
    # The configured summary callback prints the summary (else Lightning says at every start it skipped its own).
    summary = {"enable_model_summary": False} if any(isinstance(c, ModelSummary) for c in callbacks) else {}
    trainer = hydra.utils.instantiate(cfg.trainer, callbacks=callbacks, logger=loggers, **summary)
    if ckpt_path:  # a checkpoint this run cannot continue is refused before the run directory changes
        check_resume(ckpt_path, net, task.hparams.get("optimizer"))

    start_run(cfg)  # everything is built: from here on the run directory is written
    counts = {"params/total": net.num_parameters()}
    for logger in loggers:
        logger.log_hyperparams({**OmegaConf.to_container(cfg, resolve=True), **counts})
    rank_zero_info(f"{type(net).__name__} with {counts['params/total']:,} parameters; output in {cfg.paths.output_dir}")
    if ckpt_path and cfg.get("ckpt_path") is None and not cfg.get("auto_resume"):
        rank_zero_info(
            f"resuming from {ckpt_path} because hydra.run.dir already holds a checkpoint; pass ckpt_path=<a "
            "checkpoint> or a new directory to start fresh"
        )
    elif ckpt_path:
        rank_zero_info(f"resuming from {ckpt_path}")

    if cfg.get("train", True):
        try:
            trainer.fit(task, datamodule=datamodule, ckpt_path=ckpt_path)
        except SIGTERMException:
            notices = [c.received.name for c in trainer.callbacks if isinstance(c, PreemptionCheckpoint) and c.received]
            _stopped(cfg, trainer, notices[0] if notices else "SIGTERM", SIGTERM_EXIT)
        except SystemExit as stop:
            # Lightning's exit(1) on Ctrl-C, once the on-exception checkpoint is written
            if isinstance(stop.__context__, KeyboardInterrupt):
                _stopped(cfg, trainer, "Ctrl-C", CTRL_C_EXIT)
            raise
    metrics = dict(trainer.callback_metrics)
    for stage, default in (("validate", True), ("test", False)):
        if cfg.get(stage, default) and not trainer.fast_dev_run:
            getattr(trainer, stage)(task, datamodule=datamodule, verbose=True)
            metrics.update(trainer.callback_metrics)
    for timer in (c for c in trainer.callbacks if isinstance(c, PhaseTimes)):
        metrics.update(timer.finish(cfg.paths.output_dir) or {})

    if trainer.fast_dev_run:
        return None
    callback = trainer.checkpoint_callback
    saved = (getattr(callback, "last_model_path", "") or getattr(callback, "best_model_path", "")) or None
    return _result(cfg, metrics, run_record(trainer, metrics), checkpoint=saved)


def _result(cfg: DictConfig, metrics: dict, record: dict, checkpoint: str | None = None) -> float | None:
    name = cfg.get("optimized_metric")
    if not name:
        return None
    if name not in metrics:
        raise ValueError(_never_logged(cfg, name, metrics, checkpoint))
    value = float(metrics[name])
    save_result(cfg, name, value, **record)
    return value


def _never_logged(cfg: DictConfig, name: str, metrics: dict, checkpoint: str | None) -> str:
    """Why `optimized_metric` is missing after the run, how to fix it, and that the run's work is kept."""
    logged = ", ".join(sorted(metrics)) or "none"
    stage = name.split("/", 1)[0]
    trainer = cfg.get("trainer") or {}
    if stage == "val" and not any(k.startswith("val/") for k in metrics):
        after = "" if cfg.get("validate", True) else ", and validate=false skipped the pass after fit"
        why = (
            f"validation runs every trainer.val_check_interval={trainer.get('val_check_interval')} steps and did not "
            f"run within trainer.max_steps={trainer.get('max_steps')}{after}"
        )
        how = "lower trainer.val_check_interval, set validate=true, or set optimized_metric=train/loss (or null)"
    elif stage == "test" and not cfg.get("test", False):
        why, how = "test=false skipped the test pass", "set test=true, or optimized_metric to a logged metric (or null)"
    else:
        why, how = f"logged metrics: {logged}", "set optimized_metric to one of them (or null)"
    kept = f"; the run's checkpoint is kept: {checkpoint}" if checkpoint else ""
    return f"optimized_metric '{name}' was never logged ({why}); {how}{kept}"


@rank_zero_only
def start_run(cfg: DictConfig) -> None:
    """The run really starts: its configs are written and its log file opened (Hydra writes nothing at job start,
    hydra.output_subdir=null, so a start that fails before this leaves an existing run directory as it was). A start
    that continues a run in place writes its configs in `.hydra/resume-<time>/`, beside the first start's."""
    out = Path(cfg.paths.output_dir)
    configs = out / ".hydra"
    if (configs / "config.yaml").exists() or (out / "config_resolved.yaml").exists():
        stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        configs, n = configs / f"resume-{stamp}", 1
        while configs.exists():
            configs, n = configs.with_name(f"resume-{stamp}-{n}"), n + 1
        resolved = configs / "config_resolved.yaml"
    else:
        resolved = out / "config_resolved.yaml"
    configs.mkdir(parents=True, exist_ok=True)
    if HydraConfig.initialized():  # what Hydra itself writes into .hydra/ when output_subdir is set
        hydra_cfg = HydraConfig.get()
        OmegaConf.save(cfg, configs / "config.yaml")
        OmegaConf.save(OmegaConf.create({"hydra": hydra_cfg}), configs / "hydra.yaml")
        OmegaConf.save(OmegaConf.create(list(hydra_cfg.overrides.task)), configs / "overrides.yaml")
        record_launcher(configs)  # the SLURM job ids, which tell a requeued job's run
    OmegaConf.save(cfg, resolved, resolve=True)
    start_run_log()


def _stopped(cfg: DictConfig, trainer, by: str, status: int) -> None:
    """After SIGTERM or Ctrl-C (once the on-exception checkpoint is written), one line: the checkpoint and how to
    resume; then exit 143 or 130 (Lightning exits 0 on SIGTERM), so that a scheduler sees the run did not finish."""
    saved = [c.ckpt_path for c in trainer.callbacks if isinstance(c, Checkpoint) and hasattr(c, "ckpt_path")]
    saved = [p for p in saved if Path(p).is_file()]
    if saved:
        where, checkpoint = f"checkpoint: {saved[0]}", saved[0]
    else:  # stopped before a step of its own: the checkpoint it started from, if any, is still the newest
        checkpoint = newest_checkpoint(cfg.paths.output_dir)
        where = f"no new checkpoint was written; the newest is {checkpoint}" if checkpoint else "no checkpoint"
    resume = f"ckpt_path={checkpoint}" if checkpoint else "ckpt_path=<a checkpoint>"
    given = []
    if HydraConfig.initialized():
        given = [o for o in HydraConfig.get().overrides.task if not o.startswith(("ckpt_path=", "hydra.run.dir="))]
    command = " ".join(
        ["python train.py", *map(shlex.quote, [*given, resume, f"hydra.run.dir={cfg.paths.output_dir}"])]
    )
    if trainer.is_global_zero:
        print(
            f"stopped by {by} at step {trainer.global_step}; {where}; resume with: {command}",
            file=sys.stderr,
            flush=True,
        )
    raise SystemExit(status)


@rank_zero_only
def save_result(cfg: DictConfig, metric: str, value: float, **extra) -> None:
    """result.json in the run directory, what sweeps summarize (`extra`: zoo.entry.records.run_record)."""
    overrides, job = [], 0
    if HydraConfig.initialized():
        overrides = list(HydraConfig.get().overrides.task)
        job = OmegaConf.select(HydraConfig.get(), "job.num", default=0, throw_on_missing=False) or 0
    record = {"job": job, "metric": metric, "value": value, "overrides": overrides, **extra}
    (Path(cfg.paths.output_dir) / "result.json").write_text(json.dumps(record, indent=2) + "\n")


def _finish_wandb(loggers: list) -> None:
    from lightning.pytorch.loggers import WandbLogger

    if any(isinstance(logger, WandbLogger) for logger in loggers):
        import wandb

        wandb.finish()
