"""What a lab job adds to its result.json: every scalar metric it logged and what its lab callbacks recorded
(probe histories, curves such as the loss per position, the per-example record of zoo/lab/probes/per_example.py).
train.py calls `lab_record` when it writes the file."""

from __future__ import annotations

import math

import torch


def scalar_metrics(metrics: dict) -> dict[str, float]:
    out = {}
    for name, value in metrics.items():
        try:
            number = float(value)
        except (TypeError, ValueError, RuntimeError):  # non-scalar tensors, text
            continue
        out[name] = number if math.isfinite(number) else float("nan")
    return out


def merge_records(records: list[dict]) -> dict:
    """Union of the callbacks' records, section by section (metrics, series, probes)."""
    merged: dict[str, dict] = {}
    for record in records:
        for section, values in record.items():
            if section == "probes":  # step -> values: several probes log at the same steps
                for step, row in values.items():
                    merged.setdefault(section, {}).setdefault(step, {}).update(row)
            else:
                merged.setdefault(section, {}).update(values)
    return merged


def lab_record(trainer, metrics: dict) -> dict:
    """{"metrics": {...}, "series": {...}, "probes": {...}, "per_example": {...}}: the trainer's final metrics and
    the callbacks' records."""
    records = [cb.lab_record() for cb in trainer.callbacks if hasattr(cb, "lab_record")]
    # The threads the job trained with: a published run states them, and the process that publishes may have other.
    threads = {"lab/threads": float(torch.get_num_threads())}
    merged = merge_records([{"metrics": {**scalar_metrics(metrics), **threads}}, *records])
    return {k: merged[k] for k in ("metrics", "series", "probes", "per_example") if k in merged}


def log_on_rank_zero(trainer, values: dict[str, float]) -> None:
    """Log a lab callback's measurements to every logger of the run, once (rank zero), at the current step."""
    if values and trainer.is_global_zero:
        for logger in trainer.loggers:
            logger.log_metrics(values, step=trainer.global_step)
