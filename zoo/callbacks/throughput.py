"""Throughput and model-FLOPs utilization (MFU): achieved FLOP/s over the device's matmul peak."""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import torch

# Square matmul sizes tried, smallest first: a small matmul under-reads (threading and packing overheads dominate)
# and a model's large matmuls can beat it, so the probe goes up to the size a device needs to saturate.
CPU_SIZES = (512, 1024, 2048, 4096)
GPU_SIZES = (2048, 4096, 8192)
# A stored peak is re-measured when a quick probe (small matmuls, which under-read the full probe) beats it by this
# factor: far beyond the machine's noise (±15%), so the stored figure was measured while something else ran.
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


def quick_matmul_flops(device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> float:
    """A lower bound of the matmul rate in a fraction of a second: small sizes, few repeats."""
    device = torch.device(device)
    sizes = (1024, 2048) if device.type == "cuda" else (256, 512)
    return measure_matmul_flops(device, dtype, sizes=sizes, min_seconds=0.02, min_repeats=2, budget_seconds=0.3)


def peak_flops(device: torch.device, dtype: torch.dtype = torch.float32) -> tuple[float, str]:
    """(FLOP/s, where it comes from): the vendor peak on a known GPU (Lightning's table), else the matmul rate
    measured on this machine. The measurement (a few seconds) is kept in `peak_cache_file()`, keyed by the
    device's name, thread count, torch version and dtype, so that later runs on the machine start without it.

    A figure measured while the machine was busy would be kept for every later run and inflate their MFU, so a
    stored one is checked against a quick probe first and measured again when the probe beats it by
    IMPLAUSIBLE_FACTOR."""
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
        probe = quick_matmul_flops(device, dtype)
        if probe <= IMPLAUSIBLE_FACTOR * cached:
            return float(cached), f"measured earlier, kept in {path}; delete the file to measure again"
        source = (
            f"measured again: the {cached / 1e9:.1f} GFLOP/s kept in {path} was below a quick probe's "
            f"{probe / 1e9:.1f} GFLOP/s, so it was measured while the machine was busy"
        )
    flops = max(measure_matmul_flops(device, dtype), probe)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        temporary.write_text(json.dumps({**known, key: flops}, indent=1) + "\n")
        os.replace(temporary, path)  # concurrent runs (a parallel sweep) never see a half-written file
    except OSError:
        pass  # a read-only home: measure again next time
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
