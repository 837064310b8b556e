"""Build everything from the composed Hydra config and train."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import hydra
import lightning as L
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only
from omegaconf import DictConfig, OmegaConf

from zoo.entry import hydra_ddp
from zoo.entry.allocator import keep_freed_memory
from zoo.entry.builders import build_callbacks, build_loggers, build_model_config, task_inputs
from zoo.entry.config_checks import check_config
from zoo.entry.resolvers import resolve_ckpt_path
from zoo.lab.record import lab_record


def train(cfg: DictConfig) -> float | None:
    """Fit, then validate/test with the final weights; returns `cfg.optimized_metric` for sweepers."""
    loggers: list = []
    try:
        return _train(cfg, loggers)
    finally:
        _finish_wandb(loggers)  # one wandb run per multirun job, never one merged run


def _train(cfg: DictConfig, loggers: list) -> float | None:
    check_config(cfg)
    ckpt_path = resolve_ckpt_path(cfg)
    if cfg.get("seed") is not None:
        L.seed_everything(cfg.seed, workers=True)
    save_resolved_config(cfg)
    hydra_ddp.install()
    keep_freed_memory()  # no page faults for re-allocated activations at every step

    datamodule = hydra.utils.instantiate(cfg.data, _convert_="all")
    # _convert_="all": plain lists and dicts, never OmegaConf containers, reach the objects (and their checkpoints,
    # which must load with weights_only=True).
    net = hydra.utils.instantiate(build_model_config(cfg.model.net, datamodule), _convert_="all")
    if cfg.get("lab_measure") is not None:  # a lab job that times/measures the model instead of training it
        from zoo.lab.measure import measure

        return _result(cfg, *measure(cfg.lab_measure, net, datamodule))
    task = hydra.utils.instantiate(cfg.model, net=net, **task_inputs(datamodule), _convert_="all")
    loggers += build_loggers(cfg.get("logger"))
    callbacks = build_callbacks(cfg.get("callbacks"), has_logger=bool(loggers))
    trainer = hydra.utils.instantiate(cfg.trainer, callbacks=callbacks, logger=loggers)

    counts = {"params/total": net.num_parameters()}
    for logger in loggers:
        logger.log_hyperparams({**OmegaConf.to_container(cfg, resolve=True), **counts})
    rank_zero_info(f"{type(net).__name__} with {counts['params/total']:,} parameters; output in {cfg.paths.output_dir}")
    if ckpt_path:
        rank_zero_info(f"resuming from {ckpt_path}")

    # With OnExceptionCheckpoint configured, Lightning turns fit(ckpt_path=None) into "last" (resume from this
    # run's own last checkpoint if there is one) and warns about it at every start; that resume is intended.
    warnings.filterwarnings("ignore", message=r".*\(ckpt_path=None\)` was called without a model")
    warnings.filterwarnings("ignore", message=r".*there is no last checkpoint available")
    if cfg.get("train", True):
        trainer.fit(task, datamodule=datamodule, ckpt_path=ckpt_path)
    metrics = dict(trainer.callback_metrics)
    if cfg.get("validate", True) and not trainer.fast_dev_run:
        trainer.validate(task, datamodule=datamodule, verbose=True)
        metrics.update(trainer.callback_metrics)
    if cfg.get("test", False) and not trainer.fast_dev_run:
        trainer.test(task, datamodule=datamodule, verbose=True)
        metrics.update(trainer.callback_metrics)

    if trainer.fast_dev_run:
        return None
    return _result(cfg, metrics, lab_record(trainer, metrics))


def _result(cfg: DictConfig, metrics: dict, record: dict) -> float | None:
    name = cfg.get("optimized_metric")
    if not name:
        return None
    if name not in metrics:
        raise ValueError(
            f"optimized_metric '{name}' was never logged; logged metrics: {', '.join(sorted(metrics)) or 'none'}"
        )
    value = float(metrics[name])
    save_result(cfg, name, value, **record)
    return value


@rank_zero_only
def save_resolved_config(cfg: DictConfig) -> None:
    out = Path(cfg.paths.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, out / "config_resolved.yaml", resolve=True)


@rank_zero_only
def save_result(cfg: DictConfig, metric: str, value: float, **extra) -> None:
    """result.json in the run directory: what sweeps summarize when they end (`extra`: all logged metrics and
    what lab probes recorded, for `python -m zoo.lab report`)."""
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
