"""Small pieces shared by the entry points: loggers, callbacks, the model's vocabulary from the data, and the
zoo's variants of three Lightning classes (the CSV logger, the progress bar, the model summary)."""

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
    """The model's config completed from the data: every field in `datamodule.model_fields` (vocab_size from a
    tokenizer, num_classes / image_size / in_channels from an image dataset, ...) that the config leaves null
    is filled in; one that is set must agree (a vocabulary may be larger than the tokenizer's, never smaller).
    `model_fields` and `task_inputs` are declared by zoo.data.ZooDataModule; a DataModule of the user's own may
    leave them out."""
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
    """The data and model configs of a run that resumes from `ckpt_path`, and the options it overrides.

    The checkpoint holds the network, so the task options that say how the network was first made (the task's
    `not_rebuilt`, e.g. model.pretrained) are not applied again: their source becomes the checkpoint itself, for the
    task (the architecture; the weights are Lightning's to restore) and for a data option that follows them (the
    tokenizer the checkpoint stores), and a pretrained model that was moved or deleted is not read. Returns (data
    config, model config, {option: the value given}), the configs resolved; the task records the given values again
    as its hyper-parameters."""
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
    """What a task needs from its data besides batches (e.g. the tokenizer, to decode samples)."""
    return dict(getattr(datamodule, "task_inputs", {}))


def build_callbacks(cfg: DictConfig | None, *, has_logger: bool = True) -> list[Callback]:
    """The configured callbacks. Without any logger (`logger=none`) the learning-rate monitor has nowhere to write
    and Lightning refuses to start, so it is left out: that is what `logger=none` asks for."""
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
    """Lightning's CSV writer deletes an existing metrics.csv when it starts (`_check_log_dir_exists`); this one
    keeps it and continues it, taking its header as the columns known so far (a new column rewrites the file with
    the wider header, rows kept).

    A resumed start re-trains the steps after its checkpoint, which the earlier start may have logged already (it
    went on past its last checkpoint, or was killed): those rows belong to a trajectory the resume discards, so the
    first write drops the earlier rows from the resumed start's first step on, and every step stays logged once."""

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
    """Lightning's CSVLogger, except that a run resumed in its own directory (ckpt_path=last, auto_resume) appends
    to csv/metrics.csv instead of deleting the rows of the steps before the resume (TensorBoard appends by itself:
    each start adds an events file)."""

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _AppendingWriter(log_dir=self.log_dir)
        return self._experiment


class ProgressBar(RichProgressBar):
    """RichProgressBar that shows no epoch total when training is bounded by steps: with max_steps and
    max_epochs=-1 (unbounded) Lightning's bar reads `Epoch 0/-2`."""

    def _get_train_description(self, current_epoch: int) -> str:
        description = super()._get_train_description(current_epoch)
        if self.trainer.max_epochs == -1:
            description = description.replace(f"Epoch {current_epoch}/-2", f"Epoch {current_epoch}", 1)
        return description


class ModelSummary(RichModelSummary):
    """RichModelSummary without the FLOPs column and total when they are not measured: Lightning counts FLOPs only
    for a module with an `example_input_array` (the zoo's tasks have none: their inputs depend on the data), and
    otherwise prints a column of zeros and `Total FLOPs: 0`."""

    @staticmethod
    def summarize(
        summary_data: list[tuple[str, list[str]]],
        total_parameters: int,
        trainable_parameters: int,
        model_size: float,
        total_training_modes: dict[str, int],
        total_flops: int,
        **summarize_kwargs,
    ) -> None:
        if total_flops:
            return RichModelSummary.summarize(
                summary_data,
                total_parameters,
                trainable_parameters,
                model_size,
                total_training_modes,
                total_flops,
                **summarize_kwargs,
            )
        from rich import get_console
        from rich.table import Table

        columns = [(name, values) for name, values in summary_data if name != "FLOPs"]
        table = Table(header_style=summarize_kwargs.get("header_style", "bold magenta"))
        for name, _ in columns:
            table.add_column(name, justify="right" if name in ("Params", "Params per Device") else "left")
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
        console = get_console()
        console.print(table)
        console.print(totals)
        return None
