"""Build everything from the composed Hydra config and train."""

from __future__ import annotations

import warnings
from pathlib import Path

import hydra
import lightning as L
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only
from omegaconf import DictConfig, OmegaConf

from zoo.entry.builders import build_callbacks, build_loggers, build_model_config, task_inputs


def train(cfg: DictConfig) -> float | None:
    """Fit, then validate/test with the final weights; returns `cfg.optimized_metric` for sweepers."""
    if cfg.get("seed") is not None:
        L.seed_everything(cfg.seed, workers=True)
    save_resolved_config(cfg)

    datamodule = hydra.utils.instantiate(cfg.data, _convert_="all")
    net = hydra.utils.instantiate(build_model_config(cfg.model.net, datamodule))
    task = hydra.utils.instantiate(cfg.model, net=net, **task_inputs(datamodule))
    loggers = build_loggers(cfg.get("logger"))
    trainer = hydra.utils.instantiate(cfg.trainer, callbacks=build_callbacks(cfg.get("callbacks")), logger=loggers)

    counts = {"params/total": net.num_parameters()}
    for logger in loggers:
        logger.log_hyperparams({**OmegaConf.to_container(cfg, resolve=True), **counts})
    rank_zero_info(f"{type(net).__name__} with {counts['params/total']:,} parameters; output in {cfg.paths.output_dir}")

    # With OnExceptionCheckpoint configured, Lightning turns fit(ckpt_path=None) into "last" (resume from this
    # run's own last checkpoint if there is one) and warns about it at every start; that resume is intended.
    warnings.filterwarnings("ignore", message=r".*\(ckpt_path=None\)` was called without a model")
    warnings.filterwarnings("ignore", message=r".*there is no last checkpoint available")
    if cfg.get("train", True):
        trainer.fit(task, datamodule=datamodule, ckpt_path=cfg.get("ckpt_path"))
    metrics = dict(trainer.callback_metrics)
    if cfg.get("validate", True) and not trainer.fast_dev_run:
        trainer.validate(task, datamodule=datamodule, verbose=True)
        metrics.update(trainer.callback_metrics)
    if cfg.get("test", False) and not trainer.fast_dev_run:
        trainer.test(task, datamodule=datamodule, verbose=True)
        metrics.update(trainer.callback_metrics)

    name = cfg.get("optimized_metric")
    if not name or trainer.fast_dev_run:
        return None
    if name not in metrics:
        raise ValueError(
            f"optimized_metric '{name}' was never logged; logged metrics: {', '.join(sorted(metrics)) or 'none'}"
        )
    return float(metrics[name])


@rank_zero_only
def save_resolved_config(cfg: DictConfig) -> None:
    out = Path(cfg.paths.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, out / "config_resolved.yaml", resolve=True)
