"""Throughput and model-FLOPs utilization (MFU): achieved FLOP/s over the device's matmul peak."""

from __future__ import annotations

import time

import torch


def measure_matmul_flops(device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32, n: int = 1024) -> float:
    """FLOP/s of a square matmul on `device`, the best of a few repeats: the practical peak MFU is measured
    against on a CPU, where no vendor figure applies."""
    # A private generator: measuring must not advance the global RNG (a resumed run would draw other dropout masks).
    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=dtype, generator=generator)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=generator)
    best = float("inf")
    for _ in range(5):
        if a.device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(4):
            a @ b
        if a.device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / 4)
    return 2 * n**3 / best


def peak_flops(device: torch.device, dtype: torch.dtype = torch.float32) -> float:
    """The vendor peak on a known GPU (Lightning's table), else a measured matmul rate."""
    if device.type == "cuda":
        from lightning.fabric.utilities.throughput import get_available_flops

        flops = get_available_flops(device, dtype)
        if flops:
            return float(flops)
    return measure_matmul_flops(device, dtype)
