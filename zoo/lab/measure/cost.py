"""CostProbe: what a training step costs. `probe/cost/step_ms`, the median step time after `skip_steps` (with its
spread and contention flag, zoo/lab/measure/timing.py), and `probe/cost/saved_mb`, the bytes autograd saves for
backward in one step (memory.py; on CUDA also `probe/cost/cuda_peak_mb`). Step times of separate jobs compare two
moments of the machine: with `compare_with` (config fields, e.g. {attn_score: additive}) the probe times, after
training, a step of the model and of an untrained twin with those fields interleaved in one process, on the last
batch: `probe/cost/compared_step_ms` and `probe/cost/compared_over_step`."""

from __future__ import annotations

import dataclasses
import time

import lightning as L
import torch

from ..probes.record import log_on_rank_zero
from . import timing
from .memory import count_saved_tensors, cuda_peak_mb
from .timing import Timing


class CostProbe(L.Callback):
    def __init__(
        self, skip_steps: int = 10, memory_step: int = 1, compare_with: dict | None = None, rounds: int = 5
    ) -> None:
        if skip_steps < 0 or memory_step < 0:
            raise ValueError(f"skip_steps ({skip_steps}) and memory_step ({memory_step}) must be >= 0")
        self.skip_steps, self.memory_step = skip_steps, memory_step
        self.compare_with, self.rounds = compare_with, rounds
        self.compared: dict[str, float] = {}
        self._batch = None
        self.times: list[float] = []
        self.saved_bytes: int | None = None
        self._started: float | None = None
        self._counting = None

    def _sync(self, pl_module) -> None:
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._batch = batch  # the twin is timed on a real batch once training ends
        if trainer.global_step == self.memory_step:
            if pl_module.device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(pl_module.device)
            self._counting = count_saved_tensors(pl_module)
            self._counter = self._counting.__enter__()  # left in on_before_backward: the forward pass only
        self._sync(pl_module)
        self._started = time.perf_counter()

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        if self._counting is not None:
            self._counting.__exit__(None, None, None)
            self.saved_bytes, self._counting = self._counter.bytes, None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._sync(pl_module)
        if self._started is not None and trainer.global_step > self.skip_steps:
            self.times.append(time.perf_counter() - self._started)
        if trainer.global_step == self.memory_step + 1:
            self.peak_mb = cuda_peak_mb(pl_module.device)

    def on_train_end(self, trainer, pl_module) -> None:
        if self.compare_with is not None and self._batch is not None:
            self.compared = self._time_twin(pl_module)
        log_on_rank_zero(trainer, self.result_record()["metrics"])

    def _time_twin(self, pl_module) -> dict[str, float]:
        net = pl_module.net
        # untrained: the weights' values do not change what a step costs
        twin = type(net)(dataclasses.replace(net.config, **self.compare_with)).to(pl_module.device).train()

        def step(model):
            def run():
                model.loss(*self._batch).backward()
                model.zero_grad(set_to_none=True)

            return run

        was_training = net.training
        net.train()
        sync = (lambda: self._sync(pl_module)) if pl_module.device.type == "cuda" else None
        found = timing.interleave({"model": step(net), "twin": step(twin)}, rounds=self.rounds, sync=sync)
        net.train(was_training)
        return {
            **found["twin"].metrics("probe/cost/compared_step_ms"),
            **timing.ratio("probe/cost/compared_over_step", found["twin"], found["model"]),
        }

    def result_record(self) -> dict:
        metrics = dict(self.compared)
        if self.times:
            metrics.update(Timing(tuple(self.times)).metrics("probe/cost/step_ms"))
        if self.saved_bytes is not None:
            metrics["probe/cost/saved_mb"] = self.saved_bytes / 2**20
        if getattr(self, "peak_mb", None) is not None:
            metrics["probe/cost/cuda_peak_mb"] = self.peak_mb
        return {"metrics": metrics}
