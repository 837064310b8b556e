"""Evaluate a checkpoint on the validation or test split of the data it was trained on."""

from __future__ import annotations

import contextlib
import inspect

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from zoo.checkpointing.reading import load_model_from_checkpoint, read_checkpoint
from zoo.data import ZooDataModule
from zoo.entry.builders import build_loggers, task_inputs
from zoo.entry.config_checks import check_config
from zoo.entry.quiet import quiet
from zoo.entry.recorded_data import recorded_datamodule

# task name stored in checkpoints -> LightningModule class
TASKS = {
    "mlm_nsp": "zoo.tasks.BertPretrainingTask",
    "sequence_classification": "zoo.tasks.SequenceClassificationTask",
    "causal_lm": "zoo.tasks.CausalLMTask",
    "seq2seq": "zoo.tasks.Seq2SeqTask",
    "image_classification": "zoo.tasks.ImageClassificationTask",
}
SPLITS = ("val", "test")
USAGE = "python eval.py ckpt_path=<run>/checkpoints/last.ckpt [split=val|test] [data=...]"


def evaluate(cfg: DictConfig) -> dict[str, float]:
    quiet()
    if OmegaConf.is_missing(cfg, "ckpt_path") or not cfg.ckpt_path:
        raise ValueError(f"ckpt_path is required: which checkpoint to evaluate? {USAGE}")
    if cfg.split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got '{cfg.split}'")
    check_config(cfg)
    model, info = load_model_from_checkpoint(cfg.ckpt_path)
    checkpoint = read_checkpoint(cfg.ckpt_path)
    # The data the checkpoint was trained on (rebuilt without letting the file name code), unless `data=...` is given.
    if cfg.get("data"):
        check_data_fits(cfg.data, info)
        datamodule = hydra.utils.instantiate(cfg.data, _convert_="all")
    else:
        datamodule = recorded_datamodule(checkpoint, cfg.ckpt_path)
    stored = info.get("tokenizer")
    tokenizer = getattr(datamodule, "tokenizer", None)
    if stored is not None and tokenizer is not None and tokenizer.to_json() != stored:
        raise ValueError("the data's tokenizer differs from the one stored in the checkpoint; pass the training data")
    task_cls = hydra.utils.get_class(TASKS[info["task"]])
    inputs = task_inputs(datamodule)
    unexpected = set(inputs) - set(inspect.signature(task_cls).parameters)
    if unexpected:  # a DataModule of the user's own that is made for another task
        raise ValueError(
            f"{_holds(info)}, but the data gives {', '.join(sorted(unexpected))}, which that task does not take; "
            f"pass data=<a config for {info['task']}>"
        )
    task = task_cls(net=model, optimizer=None, **inputs)
    # Evaluation writes no checkpoint (else Lightning also suggests a checkpoint-upload package).
    trainer = hydra.utils.instantiate(
        cfg.trainer, logger=build_loggers(cfg.get("logger")), callbacks=[], enable_checkpointing=False
    )
    run = trainer.validate if cfg.split == "val" else trainer.test
    results = run(task, datamodule=datamodule, verbose=True)
    return {k: float(v) for k, v in results[0].items()}


def _holds(info: dict) -> str:
    return f"the checkpoint holds a {info.get('model_type')} model for {info['task']}"


def check_data_fits(data_cfg: DictConfig, info: dict) -> None:
    """Refuse a zoo dataset made for another task than the checkpoint's (a GPT on data=mnist would otherwise fail as
    "unexpected keyword argument 'class_names'")."""
    given = _data_class(data_cfg.get("_target_"))
    wanted = _data_class_for(info["task"])
    if given is None or wanted is None or given.task == wanted.task:
        return  # the right kind, or the user's own DataModule (checked by what it gives the task)
    choice = "data=<config>"
    with contextlib.suppress(Exception):
        choice = f"data={HydraConfig.get().runtime.choices['data']}"
    raise ValueError(
        f"{_holds(info)}, {choice} is {given.description}; evaluate it on {wanted.description} "
        "(leave out data= to use the data recorded in the checkpoint)"
    )


def _data_class(target) -> type[ZooDataModule] | None:
    """The zoo DataModule a `_target_` names (zoo.data.X or its module's path); None for any other."""
    for name, cls in ZooDataModule.registry.items():
        if target in (name, f"zoo.data.{cls.__name__}"):
            return cls
    return None


def _data_class_for(task: str) -> type[ZooDataModule] | None:
    return next((cls for cls in ZooDataModule.registry.values() if cls.task == task), None)
