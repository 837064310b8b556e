"""LossCurveProbe: the training loss curve (series `train_loss`, the mean every `every_n_steps` steps) and whether
training diverged: `lab/loss_start` / `lab/loss_end` (the mean of the first / last `k` steps), `lab/diverged` (1 when
the final loss is not finite or ends above where it started) and `lab/nonfinite_steps` (the share of such steps)."""

from __future__ import annotations

import math

import lightning as L

from .record import log_on_rank_zero


class LossCurveProbe(L.Callback):
    def __init__(self, every_n_steps: int = 10, k: int = 10) -> None:
        if every_n_steps <= 0 or k <= 0:
            raise ValueError(f"every_n_steps ({every_n_steps}) and k ({k}) must be positive")
        self.every_n_steps, self.k = every_n_steps, k
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        if loss is not None:
            self.losses.append(float(loss))

    def on_train_end(self, trainer, pl_module) -> None:
        log_on_rank_zero(trainer, self.result_record()["metrics"])

    def result_record(self) -> dict:
        return {"metrics": divergence(self.losses, self.k), "series": {"train_loss": self.curve()}}

    def curve(self) -> list[float]:
        n = self.every_n_steps
        chunks = [self.losses[i : i + n] for i in range(0, len(self.losses), n)]
        return [sum(c) / len(c) for c in chunks]


def divergence(losses: list[float], k: int = 10) -> dict[str, float]:
    """lab/loss_start, lab/loss_end, lab/diverged and lab/nonfinite_steps of a loss curve (see the module)."""
    if not losses:
        return {}
    k = max(1, min(k, len(losses) // 2 or 1))
    start, end = sum(losses[:k]) / k, sum(losses[-k:]) / k
    finite = math.isfinite(end) and math.isfinite(losses[-1])
    diverged = not finite or (math.isfinite(start) and end > start)
    return {
        "lab/loss_start": start if math.isfinite(start) else float("nan"),
        "lab/loss_end": end if finite else float("nan"),
        "lab/diverged": float(diverged),
        "lab/nonfinite_steps": sum(not math.isfinite(v) for v in losses) / len(losses),
    }
