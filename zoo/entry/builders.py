"""Pieces shared by the entry points: loggers, callbacks, the model's config completed from the data, and the zoo's
variants of three Lightning classes (the CSV logger, the progress bar, the model summary)."""

from __future__ import annotations

import csv

import hydra
from lightning.pytorch import Callback
from lightning.pytorch import loggers as pl_loggers
from lightning.pytorch.callbacks import LearningRateMonitor, RichModelSummary, RichProgressBar
from lightning.pytorch.loggers import Logger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.model_summary import get_formatted_model_size, get_human_readable_count
from omegaconf import DictConfig, OmegaConf


def build_model_config(net_cfg: DictConfig, datamodule) -> DictConfig:
    """The model's config with every field of `datamodule.model_fields` (vocab_size, num_classes, ...) that it leaves
    null filled in; one that is set must agree (a vocabulary may be larger than the tokenizer's, never smaller). A
    DataModule of the user's own may declare no `model_fields` / `task_inputs`."""
    net_cfg = net_cfg.copy()
    OmegaConf.set_struct(net_cfg, False)
    for field, value in getattr(datamodule, "model_fields", {}).items():
        given = net_cfg.get(field)
        if given is None:
            net_cfg[field] = value
        elif field == "vocab_size" and given < value:
            raise ValueError(
                f"model.net.vocab_size={given} is smaller than the tokenizer's {value} tokens; "
                "remove the override or raise it"
            )
        elif field != "vocab_size" and given != value:
            raise ValueError(f"model.net.{field}={given} does not match the data, which has {field}={value}")
    return net_cfg


def resumed_configs(cfg: DictConfig, ckpt_path) -> tuple[DictConfig, DictConfig, dict]:
    """(data config, model config, {option: value given}) of a run that resumes from `ckpt_path`: the task's
    `not_rebuilt` options (e.g. model.pretrained), and a data option that follows them, take the checkpoint as their
    source, so that a pretrained model that was moved or deleted is not read again."""
    data_cfg, model_cfg = cfg.data, cfg.model
    target = OmegaConf.select(cfg, "model._target_", default=None)
    keys = getattr(hydra.utils.get_object(target), "not_rebuilt", ()) if target else ()
    given = {k: model_cfg.get(k) for k in keys if model_cfg.get(k) is not None}
    if not given:
        return data_cfg, model_cfg, {}
    data_cfg = OmegaConf.create(OmegaConf.to_container(cfg.data, resolve=True))
    model_cfg = OmegaConf.create(OmegaConf.to_container(cfg.model, resolve=True))
    for key, value in given.items():
        model_cfg[key] = str(ckpt_path)
        if data_cfg.get(key) == value:
            data_cfg[key] = str(ckpt_path)
        rank_zero_info(f"model.{key}={value} is not read again: a resumed run takes its network from {ckpt_path}")
    return data_cfg, model_cfg, given


def task_inputs(datamodule) -> dict:
    return dict(getattr(datamodule, "task_inputs", {}))


def build_callbacks(cfg: DictConfig | None, *, has_logger: bool = True) -> list[Callback]:
    """The configured callbacks; without a logger (`logger=none`) no learning-rate monitor, which Lightning refuses."""
    if not cfg:
        return []
    callbacks = [hydra.utils.instantiate(c) for c in cfg.values() if c is not None and "_target_" in c]
    if not has_logger:
        callbacks = [c for c in callbacks if not isinstance(c, LearningRateMonitor)]
    return callbacks


def build_loggers(cfg: DictConfig | None) -> list[Logger]:
    if not cfg:
        return []
    return [hydra.utils.instantiate(c) for c in cfg.values() if c is not None and "_target_" in c]


class _AppendingWriter(ExperimentWriter):
    """Lightning's CSV writer, continuing an existing metrics.csv instead of deleting it; its first write drops the
    rows from the resumed start's first step on (the earlier start's, discarded), so every step is logged once."""

    _continues_file = False

    def _check_log_dir_exists(self) -> None:
        if self._fs.isfile(self.metrics_file_path):
            with self._fs.open(self.metrics_file_path, "r", newline="") as file:
                self.metrics_keys = next(csv.reader(file), [])
            self._continues_file = True

    def save(self) -> None:
        if self._continues_file and self.metrics:
            self._continues_file = False
            self._drop_rows_from(min(int(m["step"]) for m in self.metrics))
        super().save()

    def _drop_rows_from(self, first_step: int) -> None:
        with self._fs.open(self.metrics_file_path, "r", newline="") as file:
            rows = list(csv.DictReader(file))
        kept = [r for r in rows if not (r.get("step") or "").isdigit() or int(r["step"]) < first_step]
        if len(kept) == len(rows):
            return
        with self._fs.open(self.metrics_file_path, "w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=self.metrics_keys)
            writer.writeheader()
            writer.writerows(kept)


class CSVLogger(pl_loggers.CSVLogger):
    """Lightning's CSVLogger, except that a run resumed in its own directory appends to csv/metrics.csv."""

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _AppendingWriter(log_dir=self.log_dir)
        return self._experiment


class ProgressBar(RichProgressBar):
    """RichProgressBar without the epoch total `Epoch 0/-2` of a run bounded by steps (max_epochs=-1)."""

    def _get_train_description(self, current_epoch: int) -> str:
        description = super()._get_train_description(current_epoch)
        if self.trainer.max_epochs == -1:
            description = description.replace(f"Epoch {current_epoch}/-2", f"Epoch {current_epoch}", 1)
        return description


class ModelSummary(RichModelSummary):
    """RichModelSummary without the FLOPs column and total when they are not measured (Lightning counts FLOPs only
    for a module with an `example_input_array`; the zoo's tasks have none, their inputs depend on the data)."""

    @staticmethod
    def summarize(summary_data, total_parameters, trainable_parameters, model_size, total_training_modes, **kwargs):
        if kwargs.get("total_flops"):
            args = (summary_data, total_parameters, trainable_parameters, model_size, total_training_modes)
            return RichModelSummary.summarize(*args, **kwargs)
        from rich import get_console
        from rich.table import Table

        columns = [(name, values) for name, values in summary_data if name != "FLOPs"]
        table = Table(header_style=kwargs.get("header_style", "bold magenta"))
        for name, _ in columns:
            table.add_column(name, justify="right" if name.startswith("Params") else "left")
        for row in zip(*(values for _, values in columns)):
            table.add_row(*row)
        totals = Table.grid(expand=True)
        totals.add_column()
        for label, value in (
            ("Trainable params", get_human_readable_count(int(trainable_parameters))),
            ("Non-trainable params", get_human_readable_count(int(total_parameters - trainable_parameters))),
            ("Total params", get_human_readable_count(int(total_parameters))),
            ("Total estimated model params size (MB)", get_formatted_model_size(model_size)),
            ("Modules in train mode", total_training_modes["train"]),
            ("Modules in eval mode", total_training_modes["eval"]),
        ):
            totals.add_row(f"[bold]{label}[/]: {value}")
        get_console().print(table)
        get_console().print(totals)
        return None
