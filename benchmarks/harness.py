"""Timing primitives: train-step and forward timing, peak and activation memory (the matmul peak:
zoo.callbacks.throughput).

Everything is measured in this process and interleaved across implementations (round-robin over several rounds in
a rotated order, medians: zoo.lab.measure.timing, the timer the lab's timing questions use too), so that the drift of a
noisy machine cancels in the ratios between rows.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from zoo.lab.measure.timing import interleave


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def intra_op_threads(n: int | None):
    """torch's intra-op threads set to `n` inside the block (None: left as they are), restored after it."""
    if n is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def autocast(device: torch.device, dtype: torch.dtype):
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


class PeakMemory:
    """Peak memory of a block: CUDA's allocator statistics, or the process's resident-set high-water mark on
    Linux CPUs (reset through /proc/self/clear_refs; None where that is not possible)."""

    def __init__(self, device: torch.device) -> None:
        self.device, self.peak_bytes = device, None

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
        else:
            _return_free_heap()  # freed memory kept by zoo.entry.allocator would hide this block's allocations
            self._base = _rss_bytes()
            try:
                with open("/proc/self/clear_refs", "w") as f:
                    f.write("5")
            except OSError:
                self._base = None
        return self

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda":
            self.peak_bytes = torch.cuda.max_memory_allocated(self.device) - self._base
        elif self._base is not None:
            self.peak_bytes = max(0, _hwm_bytes() - self._base)


def _held_bytes(device: torch.device) -> int | None:
    """Memory in use now: CUDA's allocated bytes, or the resident set on Linux with freed heap returned first (so
    that what the allocator keeps for reuse is not counted); None where neither can be read."""
    if device.type == "cuda":
        return torch.cuda.memory_allocated(device)
    _return_free_heap()
    try:
        return _rss_bytes()
    except OSError:
        return None


def activation_bytes(p: Prepared, device: torch.device, dtype: torch.dtype) -> int | None:
    """The activation memory of a training step: what the forward pass and loss leave held for the backward (the
    tensors autograd saved), measured as the memory in use after the forward less before it, then released."""
    _sync(device)
    before = _held_bytes(device)
    with autocast(device, dtype):
        loss = p.workload.loss(p.model, p.batch)
    _sync(device)
    after = _held_bytes(device)
    del loss  # the graph and its saved tensors go with it
    return None if before is None or after is None else max(0, after - before)


def _return_free_heap() -> None:
    with contextlib.suppress(OSError, AttributeError, TypeError):
        ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim(0)


def _status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    raise OSError(key)


def _rss_bytes() -> int:
    return _status_kb("VmRSS:")


def _hwm_bytes() -> int:
    return _status_kb("VmHWM:")


@dataclass
class Workload:
    """One implementation of one configuration: how to build it and run a training step / a forward pass. `family`
    names the peer it is a setting of (None: zoo's own rows); the fastest setting of a family counts as that peer."""

    name: str
    build: Callable[[], torch.nn.Module]
    batch: Callable[[], tuple]
    loss: Callable[[torch.nn.Module, tuple], torch.Tensor]
    forward: Callable[[torch.nn.Module, tuple], object]
    optimizer_kwargs: dict = field(default_factory=dict)
    family: str | None = None


@dataclass
class Prepared:
    workload: Workload
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    batch: tuple
    train_times: list = field(default_factory=list)
    forward_times: list = field(default_factory=list)
    peak_bytes: int | None = None
    activation_bytes: int | None = None


def prepare(workload: Workload, device: torch.device) -> Prepared:
    torch.manual_seed(0)
    model = workload.build().to(device)
    model.train()
    # The fused AdamW kernel for every implementation: the default of zoo's tasks and of HF's Trainer (torch>=2.8).
    kwargs = {"lr": 1e-4, "weight_decay": 0.01, "fused": True, **workload.optimizer_kwargs}
    optimizer = torch.optim.AdamW(model.parameters(), **kwargs)
    batch = tuple(t.to(device) if isinstance(t, torch.Tensor) else t for t in workload.batch())
    return Prepared(workload, model, optimizer, batch)


def train_step(p: Prepared, device: torch.device, dtype: torch.dtype) -> float:
    """One full step (forward, loss, backward, AdamW step, zero_grad); returns seconds."""
    _sync(device)
    start = time.perf_counter()
    with autocast(device, dtype):
        loss = p.workload.loss(p.model, p.batch)
    loss.backward()
    p.optimizer.step()
    p.optimizer.zero_grad(set_to_none=True)
    _sync(device)
    return time.perf_counter() - start


@torch.no_grad()
def forward_pass(p: Prepared, device: torch.device, dtype: torch.dtype) -> float:
    p.model.eval()
    _sync(device)
    start = time.perf_counter()
    with autocast(device, dtype):
        p.workload.forward(p.model, p.batch)
    _sync(device)
    p.model.train()
    return time.perf_counter() - start


def run_interleaved(
    workloads: list[Workload], device: torch.device, dtype: torch.dtype, *, steps: int, warmup: int, rounds: int
) -> list[Prepared]:
    """Warm each implementation up, then take `rounds` round-robin turns of `steps` steps each."""
    prepared = [prepare(w, device) for w in workloads]
    for p in prepared:
        with PeakMemory(device) as memory:
            for _ in range(warmup):
                train_step(p, device, dtype)
        p.peak_bytes = memory.peak_bytes
        p.activation_bytes = activation_bytes(p, device, dtype)
        forward_pass(p, device, dtype)
    # The lab's timer (zoo/lab/measure/timing.py) runs the rounds: the same rotation of the rows' order every round, and
    # the time of each step as its own clock reads it.
    arms = {}
    for i, p in enumerate(prepared):
        arms[(i, "train")] = functools.partial(train_step, p, device, dtype)
        arms[(i, "forward")] = functools.partial(forward_pass, p, device, dtype)
    timings = interleave(arms, rounds=rounds, warmup=0, repeats=steps, sync=lambda: _sync(device))
    for i, p in enumerate(prepared):
        p.train_times, p.forward_times = list(timings[i, "train"].times), list(timings[i, "forward"].times)
    return prepared


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")
