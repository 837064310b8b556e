"""Evaluate a checkpoint on the validation or test split of the data it was trained on."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from zoo.entry.builders import build_loggers, task_inputs
from zoo.entry.recorded_data import recorded_datamodule
from zoo.tasks import load_model_from_checkpoint, read_checkpoint

# task name stored in checkpoints -> LightningModule class
TASKS = {
    "mlm_nsp": "zoo.tasks.BertPretrainingTask",
    "sequence_classification": "zoo.tasks.SequenceClassificationTask",
    "causal_lm": "zoo.tasks.CausalLMTask",
}
TASKS["seq2seq"] = "zoo.tasks.Seq2SeqTask"
TASKS["image_classification"] = "zoo.tasks.ImageClassificationTask"
SPLITS = ("val", "test")


def evaluate(cfg: DictConfig) -> dict[str, float]:
    if cfg.split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got '{cfg.split}'")
    model, info = load_model_from_checkpoint(cfg.ckpt_path)
    if info["task"] not in TASKS:
        raise ValueError(f"{cfg.ckpt_path}: no evaluation for task '{info['task']}'")
    checkpoint = read_checkpoint(cfg.ckpt_path)
    # The data the checkpoint was trained on (rebuilt without letting the file name code), unless the command line
    # chose another (`data=...`, the user's own config).
    if cfg.get("data"):
        datamodule = hydra.utils.instantiate(cfg.data, _convert_="all")
    else:
        datamodule = recorded_datamodule(checkpoint, cfg.ckpt_path)
    stored = info.get("tokenizer")
    tokenizer = getattr(datamodule, "tokenizer", None)
    if stored is not None and tokenizer is not None and tokenizer.to_json() != stored:
        raise ValueError("the data's tokenizer differs from the one stored in the checkpoint; pass the training data")
    task_cls = hydra.utils.get_class(TASKS[info["task"]])
    task = task_cls(net=model, optimizer=None, **task_inputs(datamodule))
    trainer = hydra.utils.instantiate(cfg.trainer, logger=build_loggers(cfg.get("logger")), callbacks=[])
    run = trainer.validate if cfg.split == "val" else trainer.test
    results = run(task, datamodule=datamodule, verbose=True)
    return {k: float(v) for k, v in results[0].items()}
