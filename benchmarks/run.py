"""Run the benchmarks: python -m benchmarks.run [--configs gpt,generation] [--dtypes fp32,bf16] [--steps N]
[--activation-checkpointing] [--smoke] [--tiny]

Prints a table and writes JSON. Rows of one configuration and dtype are measured interleaved in this process;
`ratio` is a row's median train-step time over the fastest peer's (below 1.0: zoo is faster). Every peer runs in
each of its attention paths (configs: one row per setting, `family` naming the peer); a second table gives, for
each peer family, its fastest setting in that dtype and zoo's ratio to it. `--render FILE` prints the tables of a
saved run without measuring (runs before every setting was measured are marked as such).
Opt-in: `--configs gpt2 --dtypes bf16` (GPT-2 124M at 1024 tokens against HF; meant for a GPU).

Defaults fit in about 15 minutes on a 2-core x86 CPU: bf16 only where the machine computes it natively
(benchmarks.native), and fewer timed steps where the measured fp32 matmul peak is low (`auto_steps`). MFU is
measured against the sustained matmul rate, probed before and after the rows (the better reading counts); a row
above it is flagged, not hidden. `--smoke` runs one step per row at the real sizes; `--smoke --tiny` runs every
row at tiny sizes (configs.TINY_SIZES), on one thread, in seconds: a check that everything runs, not a measurement.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import platform
import time

import torch

from zoo.callbacks.throughput import measure_matmul_peak
from zoo.entry.allocator import keep_freed_memory

from .configs import CONFIGS, OPT_IN_CONFIGS, generation_models, sizes
from .harness import Workload, autocast, intra_op_threads, median, run_interleaved
from .native import default_dtypes

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", default=",".join([*CONFIGS, "generation"]))
    p.add_argument("--dtypes", default="auto", help="fp32,bf16; auto: fp32, and bf16 where it is native")
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="timed steps per implementation per round (default: 5, fewer on a slow CPU)",
    )
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--json", default="benchmarks/results.json")
    p.add_argument(
        "--no-compile",
        dest="compile",
        action="store_false",
        help="skip the zoo-compile rows (zoo's model through torch.compile; compiling takes minutes)",
    )
    p.add_argument(
        "--activation-checkpointing",
        action="store_true",
        help="add a zoo-ckpt row: zoo's model with activation checkpointing (its activation and peak MB against zoo's)",
    )
    p.add_argument("--smoke", action="store_true", help="one step per row (a check that everything runs)")
    p.add_argument(
        "--tiny", action="store_true", help="tiny model sizes: a check that every row runs, not a measurement"
    )
    p.add_argument("--render", metavar="FILE", help="print the tables of a saved results JSON; measures nothing")
    return p.parse_args(argv)


def with_compiled_zoo(workloads: list[Workload]) -> list[Workload]:
    """Add a "zoo-compile" row: zoo's model (the inner nn.Module) through torch.compile, as `model.compile=true`
    trains it."""
    zoo = next(w for w in workloads if w.name == "zoo")
    compiled = dataclasses.replace(zoo, name="zoo-compile", build=lambda: _compiled(zoo.build()))
    return [*workloads, compiled]


def _compiled(model):
    # The model's own compile(), not torch.compile(model): it compiles the fused training loss too.
    model.compile()
    return model


def with_checkpointed_zoo(workloads: list[Workload]) -> list[Workload]:
    """Add a "zoo-ckpt" row: zoo's model rebuilt with `activation_checkpointing=True`, as
    `model.net.activation_checkpointing=true` trains it (same sizes; its memory against the zoo row's)."""
    zoo = next(w for w in workloads if w.name == "zoo")

    def build():
        model = zoo.build()
        return type(model)(dataclasses.replace(model.config, activation_checkpointing=True))

    return [*workloads, dataclasses.replace(zoo, name="zoo-ckpt", build=build)]


def bench_training(name, dtype_name, device, args) -> list[dict]:
    workloads, flops, items, unit = {**CONFIGS, **OPT_IN_CONFIGS}[name](sizes(name, args.tiny))
    if args.activation_checkpointing:
        workloads = with_checkpointed_zoo(workloads)
    if args.compile:
        workloads = with_compiled_zoo(workloads)
    dtype = DTYPES[dtype_name]
    prepared = run_interleaved(workloads, device, dtype, steps=args.steps, warmup=args.warmup, rounds=args.rounds)
    rows = []
    for p in prepared:
        step = median(p.train_times)
        rows.append(
            dict(
                config=name,
                dtype=dtype_name,
                impl=p.workload.name,
                train_ms=step * 1e3,
                forward_ms=median(p.forward_times) * 1e3,
                throughput=items / step,
                unit=unit,
                peak_mb=None if p.peak_bytes is None else p.peak_bytes / 2**20,
                activation_mb=None if p.activation_bytes is None else p.activation_bytes / 2**20,
                achieved_gflops=flops / step / 1e9,
                family=p.workload.family,
            )
        )
    peers = [r["train_ms"] for r in rows if r["family"] is not None]
    for r in rows:
        r["ratio"] = r["train_ms"] / min(peers) if peers else float("nan")
    return rows


# Runs before issue 30 named one row per peer setting without a `family`; their names say it.
LEGACY_FAMILIES = {
    "hf-sdpa": "hf",
    "hf-eager": "hf",
    "timm": "timm",
    "torchvision": "torchvision",
    "hf-marian": "marian",
    "torch-nn-transformer": "torch-nn",
}
FEWER_SETTINGS = (
    "measured against fewer peer settings: each peer in the attention paths listed per row, not every path its "
    "users can choose (before issue 30)"
)


def family_of(row: dict) -> str | None:
    """The peer family of a training row; None for zoo's own rows (zoo, zoo-compile, zoo-ckpt)."""
    return row["family"] if "family" in row else LEGACY_FAMILIES.get(row["impl"])


def fastest_by_family(rows: list[dict]) -> list[dict]:
    """For each configuration, dtype and peer family (in the order of the rows): the family's fastest setting (the
    lowest train step), every setting it ran, and each zoo row's train step over that fastest setting."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if "train_ms" in r:
            groups.setdefault((r["config"], r["dtype"]), []).append(r)
    summary = []
    for (config, dtype), group in groups.items():
        ours = [r for r in group if family_of(r) is None]
        families: dict[str, list[dict]] = {}
        for r in group:
            if family_of(r) is not None:
                families.setdefault(family_of(r), []).append(r)
        for family, settings in families.items():
            fastest = min(settings, key=lambda r: r["train_ms"])
            summary.append(
                dict(
                    config=config,
                    dtype=dtype,
                    family=family,
                    fastest=fastest["impl"],
                    train_ms=fastest["train_ms"],
                    settings=[r["impl"] for r in settings],
                    zoo_vs={r["impl"]: r["train_ms"] / fastest["train_ms"] for r in ours},
                )
            )
    return summary


def peer_settings(rows: list[dict]) -> dict:
    """{config: {family: [settings]}} of the training rows: what a run measured each peer in."""
    out: dict[str, dict[str, list[str]]] = {}
    for r in rows:
        if "train_ms" in r and family_of(r) is not None:
            settings = out.setdefault(r["config"], {}).setdefault(family_of(r), [])
            if r["impl"] not in settings:
                settings.append(r["impl"])
    return out


@torch.no_grad()
def bench_generation(dtype_name, device, args) -> list[dict]:
    dtype = DTYPES[dtype_name]
    lengths, gpt_sizes = sizes("generation", args.tiny), sizes("gpt", args.tiny)
    models = [(n, m.to(device), g) for n, m, g in generation_models(lengths, gpt_sizes)]
    rows = []
    for batch in (1, 8):
        torch.manual_seed(0)
        prompt = torch.randint(0, gpt_sizes["vocab"], (batch, lengths["prompt"]), device=device)
        times = {n: [] for n, _, _ in models}
        outputs = {}
        rounds = 1 if args.smoke else args.rounds
        for _ in range(rounds):
            for name, model, generate in models:
                with autocast(device, dtype):
                    start = time.perf_counter()
                    outputs[name] = generate(model, prompt)
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                    times[name].append(time.perf_counter() - start)
        new = lengths["new_tokens"] * batch
        hf_rate = new / median(times["hf"])
        for name in times:
            rate = new / median(times[name])
            rows.append(
                dict(
                    config=f"generation b{batch}",
                    dtype=dtype_name,
                    impl=name,
                    total_ms=median(times[name]) * 1e3,
                    tokens_per_s=rate,
                    vs_hf=rate / hf_rate,
                    same_tokens=bool(torch.equal(outputs[name], outputs["zoo"])),
                )
            )
    return rows


# The workloads are sized for a CPU with a ~250 GFLOP/s fp32 matmul peak to run 5 timed steps per round in the
# default budget; a slower CPU gets proportionally fewer (at least 2, for a median).
REFERENCE_PEAK = 250e9


def auto_steps(device: torch.device, fp32_peak: float) -> int:
    if device.type == "cuda":
        return 5
    return max(2, min(5, round(5 * fp32_peak / REFERENCE_PEAK)))


def probe(device: torch.device, dtypes: list[str], args) -> dict:
    budget = 0.1 if args.tiny else 0.5 if args.smoke else 8.0  # tiny: the smallest size, a few repeats
    return {d: measure_matmul_peak(device, DTYPES[d], budget_seconds=budget) for d in dtypes}


def main(argv=None) -> list[dict]:
    args = parse_args(argv)
    # Tiny sizes run on one intra-op thread: their ops gain nothing from a second one, and on a busy machine each op
    # would wait for it to be scheduled (rows took seconds instead of milliseconds).
    if args.render:
        return render(args.render)
    with intra_op_threads(1 if args.tiny else None):
        return benchmark(args)


def render(path: str) -> list[dict]:
    """Print the tables of a saved run (any results JSON in benchmarks/results/, older formats included)."""
    with open(path) as f:
        saved = json.load(f)
    print_table(saved["rows"], saved["meta"])
    return saved["rows"]


def benchmark(args) -> list[dict]:
    started = time.perf_counter()
    # Process-wide, so every implementation gets it: freed activations stay mapped (no page faults per step),
    # as zoo's train.py runs.
    allocator = keep_freed_memory()
    device, dtypes, configs = check_args(args)
    notes = []
    if args.dtypes == "auto":
        dtypes, notes = default_dtypes(device)
    if args.tiny:
        notes.append("tiny model sizes (--tiny): a check that every row runs, not a measurement")
    before = probe(device, dtypes, args)
    if args.smoke:
        args.steps, args.warmup, args.rounds = 1, 1, 1
    elif args.steps is None:
        reference = "fp32" if "fp32" in dtypes else dtypes[0]
        args.steps = auto_steps(device, before[reference].flops)
        if args.steps < 5:
            notes.append(
                f"{args.steps} timed steps per round instead of 5: the {reference} matmul peak is "
                f"{before[reference].flops / 1e9:.0f} GFLOP/s here (--steps 5 to override)"
            )
    for line in notes:
        print(line)
    rows = []
    for name in configs:
        for d in dtypes:
            if name == "generation":
                rows += bench_generation(d, device, args)
            else:
                rows += bench_training(name, d, device, args)
    # A second probe after the rows: a reading taken while the machine was busy elsewhere counts less.
    after = probe(device, dtypes, args)
    peaks = {d: max(before[d], after[d], key=lambda p: p.flops) for d in dtypes}
    for r in rows:
        if "achieved_gflops" in r:
            r["mfu"] = r["achieved_gflops"] * 1e9 / peaks[r["dtype"]].flops
            r["above_peak"] = r["mfu"] > 1  # the probe read below what the model reached: MFU is not meaningful
    meta = dict(
        date=datetime.date.today().isoformat(),
        machine=machine_name(),
        device=str(device),
        threads=torch.get_num_threads(),
        torch=torch.__version__,
        cpu_capability=torch.backends.cpu.get_cpu_capability() if device.type == "cpu" else None,
        peak_gflops={d: peaks[d].flops / 1e9 for d in dtypes},
        peak_matmul_size={d: peaks[d].size for d in dtypes},
        steps=args.steps,
        rounds=args.rounds,
        notes=notes,
        # Every attention path of every peer (issue 30); files without this key measured fewer (FEWER_SETTINGS).
        peer_settings=peer_settings(rows),
        new_tokens=sizes("generation", args.tiny)["new_tokens"],
        kept_freed_memory=allocator,
        wall_s=time.perf_counter() - started,
    )
    print_table(rows, meta)
    with open(args.json, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=2)
    return rows


def check_args(args) -> tuple[torch.device, list[str], list[str]]:
    """Every option checked before minutes of measuring start; a bad one is a one-line error."""
    dtypes, configs = ([] if args.dtypes == "auto" else args.dtypes.split(",")), args.configs.split(",")
    known = [*CONFIGS, "generation", *OPT_IN_CONFIGS]
    for d in dtypes:
        if d not in DTYPES:
            raise SystemExit(f"unknown dtype '{d}'; choose from {', '.join(DTYPES)}")
    for name in configs:
        if name not in known:
            raise SystemExit(f"unknown config '{name}'; choose from {', '.join(known)}")
    if (args.steps is not None and args.steps < 1) or args.rounds < 1 or args.warmup < 0:
        raise SystemExit("--steps and --rounds must be at least 1, --warmup at least 0")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}: no CUDA device here; leave --device out to use the CPU")
    return device, dtypes, configs


def machine_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def print_table(rows, meta) -> None:
    """The per-setting table, the fastest setting of each peer family with zoo's ratios to it, and generation.
    Tolerates the older results files (keys added since are shown as "-")."""
    sizes_at = meta.get("peak_matmul_size", {})
    print(
        f"# {meta['date']} {meta['device']} ({meta['machine']}, {meta['threads']} threads), torch {meta['torch']}; "
        "matmul peak "
        + ", ".join(
            f"{d} {g:.0f} GFLOP/s" + (f" (n={sizes_at[d]})" if d in sizes_at else "")
            for d, g in meta["peak_gflops"].items()
        )
        + f"; {meta['wall_s'] / 60:.1f} min"
    )
    if "peer_settings" not in meta:
        print(f"# {FEWER_SETTINGS}")
    summary = fastest_by_family(rows)
    # The fastest setting is marked where a family ran several.
    fastest = {(f["config"], f["dtype"], f["fastest"]) for f in summary if len(f["settings"]) > 1}
    print(
        "| config | dtype | impl | peer | train step ms | vs fastest peer | forward ms | throughput | peak MB "
        "| activation MB | MFU |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "train_ms" in r:
            peak, held = ("-" if r.get(k) is None else f"{r[k]:.0f}" for k in ("peak_mb", "activation_mb"))
            family = family_of(r)
            peer = (
                "-"
                if family is None
                else family + (" (fastest)" if (r["config"], r["dtype"], r["impl"]) in fastest else "")
            )
            mfu = "-" if r.get("mfu") is None else f"{r['mfu']:.2f}" + ("*" if r.get("above_peak") else "")
            print(
                f"| {r['config']} | {r['dtype']} | {r['impl']} | {peer} | {r['train_ms']:.1f} | {r['ratio']:.2f}x | "
                f"{r['forward_ms']:.1f} | {r['throughput']:.0f} {r['unit']}/s | {peak} | {held} | {mfu} |"
            )
    if any(r.get("above_peak") for r in rows):
        print("* above the measured matmul peak: the probe under-read this machine (busy?), so this MFU means nothing")
    if summary:
        print("\n| config | dtype | peer | settings | fastest setting | its step ms | zoo vs it |")
        print("|---|---|---|---|---|---|---|")
        for f in summary:
            ratios = ", ".join(f"{impl} {ratio:.2f}x" for impl, ratio in f["zoo_vs"].items())
            print(
                f"| {f['config']} | {f['dtype']} | {f['family']} | {', '.join(f['settings'])} | {f['fastest']} | "
                f"{f['train_ms']:.1f} | {ratios} |"
            )
    generation = [r for r in rows if "total_ms" in r]
    if generation:
        # Runs before `new_tokens` was saved used GENERATION's lengths.
        new_tokens = meta.get("new_tokens", sizes("generation")["new_tokens"])
        print(
            f"\n| generation | dtype | impl | ms for {new_tokens} new tokens | tokens/s | vs HF | same tokens as zoo |"
        )
        print("|---|---|---|---|---|---|---|")
        for r in generation:
            print(
                f"| {r['config']} | {r['dtype']} | {r['impl']} | {r['total_ms']:.0f} | {r['tokens_per_s']:.0f} | "
                f"{r['vs_hf']:.2f}x | {r['same_tokens']} |"
            )


if __name__ == "__main__":
    main()
