"""Throughput and model-FLOPs utilization (MFU): achieved FLOP/s over the device's matmul peak."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

# Square matmul sizes tried, smallest first: a small matmul under-reads (threading and packing overheads dominate)
# and a model's large matmuls can beat it, so the probe goes up to the size a device needs to saturate.
CPU_SIZES = (512, 1024, 2048, 4096)
GPU_SIZES = (2048, 4096, 8192)


@dataclass(frozen=True)
class MatmulPeak:
    flops: float  # best FLOP/s seen
    size: int  # the n of the n x n x n matmul that reached it
    seconds: float  # what the probe took


def measure_matmul_peak(
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    *,
    sizes: tuple[int, ...] | None = None,
    min_seconds: float = 0.25,
    min_repeats: int = 3,
    budget_seconds: float = 2.0,
) -> MatmulPeak:
    """The sustained matmul rate of `device`, best over sizes and repeats: for each size one untimed warm-up call,
    then repeats until `min_seconds` of timed work (at least `min_repeats`). Every size is tried (on a loaded
    machine one size's reading may be low), except one whose repeats would overrun `budget_seconds` at the best
    rate so far: on a slow CPU, or in bf16 without native support, the large sizes would take minutes."""
    device = torch.device(device)
    sizes = sizes or (GPU_SIZES if device.type == "cuda" else CPU_SIZES)
    # A private generator: measuring must not advance the global RNG (a resumed run would draw other dropout masks).
    generator = torch.Generator(device=device).manual_seed(0)
    started = time.perf_counter()
    best = MatmulPeak(0.0, sizes[0], 0.0)
    for n in sizes:
        flop = 2 * n**3
        if best.flops and (min_repeats + 1) * flop / best.flops > budget_seconds - (time.perf_counter() - started):
            break
        a = torch.randn(n, n, device=device, dtype=dtype, generator=generator)
        b = torch.randn(n, n, device=device, dtype=dtype, generator=generator)
        _timed_matmul(a, b)  # warm-up: allocation, kernel selection, thread pool start
        times, spent = [], 0.0
        while len(times) < min_repeats or spent < min_seconds:
            times.append(_timed_matmul(a, b))
            spent += times[-1]
            if time.perf_counter() - started > budget_seconds and len(times) >= min_repeats:
                break
        rate = flop / min(times)
        if rate > best.flops:
            best = MatmulPeak(rate, n, 0.0)
    return MatmulPeak(best.flops, best.size, time.perf_counter() - started)


def _timed_matmul(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.device.type == "cuda":
        torch.cuda.synchronize(a.device)
    start = time.perf_counter()
    torch.mm(a, b)
    if a.device.type == "cuda":
        torch.cuda.synchronize(a.device)
    return time.perf_counter() - start


def measure_matmul_flops(device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32, **kwargs) -> float:
    """FLOP/s of the sustained matmul rate (`measure_matmul_peak`): the practical peak MFU is measured against on
    a CPU, where no vendor figure applies."""
    return measure_matmul_peak(device, dtype, **kwargs).flops


def peak_flops(device: torch.device, dtype: torch.dtype = torch.float32) -> float:
    """The vendor peak on a known GPU (Lightning's table), else a measured matmul rate."""
    if device.type == "cuda":
        from lightning.fabric.utilities.throughput import get_available_flops

        flops = get_available_flops(device, dtype)
        if flops:
            return float(flops)
    return measure_matmul_flops(device, dtype)
