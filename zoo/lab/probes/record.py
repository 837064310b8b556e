"""How a lab callback logs its measurements (what it adds to result.json is its `result_record()`, collected by
zoo.entry.records)."""

from __future__ import annotations


def log_on_rank_zero(trainer, values: dict[str, float]) -> None:
    """Log a lab callback's measurements to every logger of the run, once (rank zero), at the current step."""
    if values and trainer.is_global_zero:
        for logger in trainer.loggers:
            logger.log_metrics(values, step=trainer.global_step)
