"""Throughput and model-FLOPs utilization (MFU): achieved FLOP/s over the device's matmul peak."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import torch

# Square matmul sizes tried, smallest first, up to the size a device needs to saturate (a small one under-reads).
CPU_SIZES = (512, 1024, 2048, 4096)
GPU_SIZES = (2048, 4096, 8192)
# A stored peak that a quick probe (which under-reads) beats by this factor, far beyond the machine's noise (±15%),
# was measured while something else ran: it is measured again.
IMPLAUSIBLE_FACTOR = 1.5


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
    """The sustained matmul rate of `device`, best over sizes and repeats: for each size a warm-up call, then
    repeats until `min_seconds` of timed work (at least `min_repeats`); a size whose repeats would overrun
    `budget_seconds` at the best rate so far is not started."""
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


def _quick_matmul_flops(device: torch.device, dtype: torch.dtype) -> float:
    sizes = (1024, 2048) if device.type == "cuda" else (256, 512)
    return measure_matmul_peak(device, dtype, sizes=sizes, min_seconds=0.02, min_repeats=2, budget_seconds=0.3).flops


def peak_flops(device: torch.device, dtype: torch.dtype = torch.float32) -> tuple[float, str]:
    """(FLOP/s, where it comes from): the vendor peak on a known GPU, else the matmul rate measured here, kept in
    `peak_cache_file()` for later runs and checked against a quick probe first (IMPLAUSIBLE_FACTOR)."""
    if device.type == "cuda":
        from lightning.fabric.utilities.throughput import get_available_flops

        flops = get_available_flops(device, dtype)
        if flops:
            return float(flops), "vendor figure"
    key = _machine_key(device, dtype)
    path = peak_cache_file()
    known = _read_peaks(path)
    cached = known.get(key)
    source = "measured now"
    probe = 0.0
    if isinstance(cached, (int, float)) and cached > 0:
        probe = _quick_matmul_flops(device, dtype)
        if probe <= IMPLAUSIBLE_FACTOR * cached:
            return float(cached), f"measured earlier, kept in {path}; delete the file to measure again"
        source = (
            f"measured again: the {cached / 1e9:.1f} GFLOP/s kept in {path} was below a quick probe's "
            f"{probe / 1e9:.1f} GFLOP/s, so it was measured while the machine was busy"
        )
    flops = max(measure_matmul_peak(device, dtype).flops, probe)
    from zoo.data.atomic import atomic_write  # the data package: loaded by a run anyway, not by the benchmarks

    with contextlib.suppress(OSError):  # a read-only home: measure again next time
        atomic_write(path, json.dumps({**known, key: flops}, indent=1) + "\n")  # a parallel sweep reads it whole
    return flops, source


def _read_peaks(path: Path) -> dict:
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # none yet, or damaged: measured again and written whole
    return known if isinstance(known, dict) else {}


def peak_cache_file() -> Path:
    """ZOO_CACHE_DIR (the data cache, if set), else ~/.cache/transformer-zoo."""
    root = os.environ.get("ZOO_CACHE_DIR") or Path.home() / ".cache" / "transformer-zoo"
    return Path(root) / "matmul_peaks.json"


def _machine_key(device: torch.device, dtype: torch.dtype) -> str:
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = _cpu_model() or platform.processor() or platform.machine()
    return f"{name} | {device.type} | {torch.get_num_threads()} threads | torch {torch.__version__} | {dtype}"


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None
