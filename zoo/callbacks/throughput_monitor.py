"""Training throughput and MFU of a zoo task: Lightning's ThroughputMonitor, told what a zoo batch holds (the
task's `batch_samples` / `batch_items` / `batch_flops`) and, on a CPU, the measured MFU denominator
(`zoo.callbacks.throughput.peak_flops`). Logs train/tokens_per_sec (or images), over all ranks, and train/mfu, per
device.
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ThroughputMonitor
from lightning.pytorch.callbacks.throughput_monitor import _plugin_to_compute_dtype
from lightning.pytorch.trainer.states import RunningStage, TrainerFn
from lightning.pytorch.utilities import rank_zero_info

from .throughput import peak_flops


class ZooThroughputMonitor(ThroughputMonitor):
    # Measured peaks by (device, dtype), once per process: a probe takes seconds, and a sweep runs many fits.
    _peaks: dict[tuple[str, Any], float] = {}

    def __init__(self, window_size: int | None = None, peak_flops_per_sec: float | None = None) -> None:
        """window_size: steps the rates average over (None: the trainer's log_every_n_steps). peak_flops_per_sec:
        the MFU denominator (None: Lightning's vendor figure on a known GPU, else a measured matmul rate)."""
        if window_size is not None and window_size < 2:
            raise ValueError(f"window_size must be at least 2 (a rate needs two points in time), got {window_size}")
        if peak_flops_per_sec is not None and not peak_flops_per_sec > 0:
            raise ValueError(f"peak_flops_per_sec must be positive (or null to measure it), got {peak_flops_per_sec}")
        # The task's hooks are bound in setup(); these stand in until then.
        super().__init__(batch_size_fn=len, length_fn=len)
        self.window_size = window_size
        self.peak_flops_per_sec = peak_flops_per_sec

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        missing = [
            hook
            for hook in ("batch_samples", "batch_items", "batch_flops", "throughput_unit")
            if not hasattr(pl_module, hook)
        ]
        if missing:
            raise TypeError(
                f"ZooThroughputMonitor needs a zoo task (zoo.tasks.base.ZooTask); "
                f"{type(pl_module).__name__} lacks {', '.join(missing)}; remove callbacks.throughput"
            )
        self.batch_size_fn, self.length_fn = pl_module.batch_samples, pl_module.batch_items
        self.kwargs["window_size"] = self.window_size or max(2, trainer.log_every_n_steps)
        super().setup(trainer, pl_module, stage)  # builds one Throughput per stage with Lightning's GPU peak
        peak = self._peak(trainer) if stage == TrainerFn.FITTING else None
        for throughput in self._throughputs.values():
            throughput.available_flops = peak

    def _peak(self, trainer: L.Trainer) -> float | None:
        if self.peak_flops_per_sec is not None:
            return self.peak_flops_per_sec
        if not trainer.is_global_zero:  # only rank zero reports; a probe per rank would only compete for cores
            return None
        device, dtype = trainer.strategy.root_device, _plugin_to_compute_dtype(trainer.precision_plugin)
        key = (str(device), dtype)
        if key not in self._peaks:
            self._peaks[key], source = peak_flops(device, dtype)
            rank_zero_info(
                f"MFU is reported against a {str(dtype).removeprefix('torch.')} peak of "
                f"{self._peaks[key] / 1e9:.0f} GFLOP/s on {device} ({source})"
            )
        return self._peaks[key]

    def _compute(self, trainer: L.Trainer, iter_num: int | None = None) -> None:
        # Training rates only: evaluation steps are counted but not logged (their steps would run backwards).
        if trainer.state.stage != RunningStage.TRAINING or not trainer._logger_connector.should_update_logs:
            return
        computed = self._throughputs[RunningStage.TRAINING].compute()
        unit = trainer.lightning_module.throughput_unit
        metrics = {}
        if "device/items_per_sec" in computed:
            metrics[f"train/{unit}_per_sec"] = computed["device/items_per_sec"] * trainer.world_size
        if "device/mfu" in computed:
            metrics["train/mfu"] = computed["device/mfu"]
        if metrics:
            trainer._logger_connector.log_metrics(metrics, step=iter_num)
