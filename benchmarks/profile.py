"""Where a benchmark step goes: python -m benchmarks.profile vit [--impls zoo,timm-unfused] [--dtype fp32] [--ops 15]
[--tiny]

For each implementation of one configuration (benchmarks/configs.py): the median time of the forward (with the
loss), the backward and the optimizer step, measured interleaved as benchmarks.run measures; then, with --ops,
torch.profiler's heaviest operators, and with --shapes the matmuls grouped by input shape (two implementations
that call the same GEMMs differ in what is left). The process keeps freed memory as train.py and the benchmark
do (zoo.entry.allocator); without that, page faults on fresh allocations dominate what a profile shows. `--tiny`
runs the configuration at tiny sizes (configs.TINY_SIZES) on one thread: a check that it runs, not a measurement.

On an x86 machine `ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2` makes torch,
oneDNN and MKL take their AVX2 code paths: an approximation of an AVX2-only CPU, not a substitute for one.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from zoo.entry.allocator import keep_freed_memory

from .configs import CONFIGS, sizes
from .harness import Prepared, autocast, intra_op_threads, prepare

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
MATMULS = ("aten::mm", "aten::addmm", "aten::bmm")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config", choices=sorted(CONFIGS))
    p.add_argument("--impls", default=None, help="comma-separated (default: every implementation of the config)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    p.add_argument("--steps", type=int, default=8, help="timed steps per implementation and round")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--ops", type=int, default=0, help="print the N heaviest operators of 5 profiled steps")
    p.add_argument("--shapes", action="store_true", help="print the matmuls of 5 profiled steps by input shape")
    p.add_argument(
        "--tiny", action="store_true", help="tiny model sizes: a check that every row runs, not a measurement"
    )
    return p.parse_args(argv)


def phased_step(p: Prepared, dtype: torch.dtype) -> tuple[float, float, float]:
    """Seconds of (forward + loss, backward, optimizer step + zero_grad) of one training step on the CPU."""
    start = time.perf_counter()
    with autocast(torch.device("cpu"), dtype):
        loss = p.workload.loss(p.model, p.batch)
    forward = time.perf_counter()
    loss.backward()
    backward = time.perf_counter()
    p.optimizer.step()
    p.optimizer.zero_grad(set_to_none=True)
    return forward - start, backward - forward, time.perf_counter() - backward


def profiled(p: Prepared, dtype: torch.dtype, steps: int = 5, record_shapes: bool = False):
    with torch.profiler.profile(record_shapes=record_shapes) as prof:
        for _ in range(steps):
            phased_step(p, dtype)
    return prof


def main(argv=None) -> dict[str, tuple[float, float, float]]:
    args = parse_args(argv)
    with intra_op_threads(1 if args.tiny else None):  # as benchmarks.run's --tiny
        return measure(args)


def measure(args) -> dict[str, tuple[float, float, float]]:
    keep_freed_memory()
    workloads = CONFIGS[args.config](sizes(args.config, args.tiny))[0]
    names = [w.name for w in workloads]
    chosen = names if args.impls is None else args.impls.split(",")
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        raise SystemExit(f"no implementation {', '.join(unknown)} in '{args.config}'; it has: {', '.join(names)}")
    dtype = DTYPES[args.dtype]
    prepared = {w.name: prepare(w, torch.device("cpu")) for w in workloads if w.name in chosen}
    times: dict[str, list[tuple[float, float, float]]] = {name: [] for name in prepared}
    for p in prepared.values():
        for _ in range(2):  # warm-up
            phased_step(p, dtype)
    for _ in range(args.rounds):
        for name, p in prepared.items():
            times[name] += [phased_step(p, dtype) for _ in range(args.steps)]
    medians = {name: tuple(statistics.median(t[i] for t in ts) * 1e3 for i in range(3)) for name, ts in times.items()}
    print(f"{args.config} {args.dtype}, cpu capability {torch.backends.cpu.get_cpu_capability()}, ms per step:")
    for name, (fwd, bwd, opt) in medians.items():
        total = fwd + bwd + opt
        print(f"  {name:22s} forward {fwd:7.1f}  backward {bwd:7.1f}  optimizer {opt:5.1f}  total {total:7.1f}")
    for name, p in prepared.items():
        if args.ops:
            print(f"===== {name}: heaviest operators of 5 steps")
            print(profiled(p, dtype).key_averages().table(sort_by="self_cpu_time_total", row_limit=args.ops))
        if args.shapes:
            events = profiled(p, dtype, record_shapes=True).key_averages(group_by_input_shape=True)
            rows = sorted((e for e in events if e.key in MATMULS), key=lambda e: -e.self_cpu_time_total)
            total = sum(e.self_cpu_time_total for e in rows) / 5e3
            print(f"===== {name}: matmuls {total:.1f} ms per step, by input shape")
            for e in rows[:15]:
                ms = e.self_cpu_time_total / 5e3
                print(f"  {e.key:12s} {e.count // 5:3d} a step  {ms:7.2f} ms  {e.input_shapes}")
    return medians


if __name__ == "__main__":
    main()
