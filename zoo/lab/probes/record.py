"""How a lab callback logs its measurements and hands them to result.json (`result_record()`, collected by
zoo.entry.records)."""

from __future__ import annotations

import lightning as L


def log_on_rank_zero(trainer, values: dict[str, float]) -> None:
    """Log a lab callback's measurements to every logger of the run, once (rank zero), at the current step."""
    if values and trainer.is_global_zero:
        for logger in trainer.loggers:
            logger.log_metrics(values, step=trainer.global_step)


class Recorder(L.Callback):
    """A lab callback that measures once and keeps what it measured (`metrics`, and `series` where it has any)."""

    def __init__(self) -> None:
        self.metrics: dict[str, float] = {}
        self.series: dict[str, list[float]] = {}

    def record(self, trainer, metrics: dict[str, float]) -> None:
        self.metrics = metrics
        log_on_rank_zero(trainer, metrics)

    def result_record(self) -> dict:
        return {"metrics": dict(self.metrics), **({"series": self.series} if self.series else {})}
