"""End to end: the fast MNIST recipe trained with zoo's ViT and with the same architecture built by timm, so that the
step-level lead of benchmarks.run is seen (or not) in the wall time of a whole training run (issue 30).

    python -m benchmarks.end_to_end [--steps N] [--repeats R] [--order zoo,timm] [--timm-fused auto|true|false]
        [--threads T] [--json PATH] [--tiny]

The config is composed as train.py composes `experiment=vit_mnist_fast`, and everything but the network is the same
code for both models: the MNIST DataModule from the data directory (ZOO_DATA_DIR, as train.py reads it: split,
batch, augmentation), ImageClassificationTask (loss, label smoothing, metrics, parameter groups), the recipe's
optimizer MuonWithAdamW (Muon over the block matrices, told timm's block class through its `block_types` option;
AdamW over the rest), the warm-up/stable/decay schedule, and Lightning's Trainer with the recipe's precision
(bf16-mixed), gradient clipping, seed and step count. Both runs are re-seeded before the fit, so they see the same
batches with the same augmentation draws (a checksum of the batches is reported per run; `same_data`: all equal).
Unlike `python train.py`, neither run has a logger, checkpoints, a progress bar or other callbacks (the task's
checkpoint hooks describe a zoo network; timm's has no such description): the wall times are those of the training
and test passes alone.

The timm model is `timm.models.vision_transformer.VisionTransformer` with zoo's sizes, global average pooling without
a class token (timm's fc_norm after the pooling, as zoo's norm for pool="avg"), the same LayerNorm eps and QK-norm.
Two differences are known and handled: zoo's QK-norm is an RMSNorm of each head (a scale, no bias), timm's qk_norm a
LayerNorm (scale and bias), so timm's q/k norms are replaced by timm's own RmsNormFp32 (float32 inside, as zoo's)
with zoo's eps; and zoo keeps its positions as a (tokens, width) table, timm as (1, tokens, width): the same count.
The parameter counts and the optimizer's groups (tensors and parameters per group, the shapes Muon orthogonalizes)
must agree, else the run is refused before training. Each library initializes its weights its own way.

timm's attention runs in its fastest setting for this machine and dtype: `--timm-fused auto` (the default) decides
between fused_attn True (SDPA) and False (matmul-softmax-matmul) by a short interleaved step probe
(benchmarks.harness: plain AdamW steps on a batch of the recipe's shape, zoo's model timed beside them for the
step-level ratio) and reports it. Per run: the wall time of the fit and of fit + test, the fit's CPU time (far below
wall time x threads: the machine was busy), steps/s over the steps after the first WARMUP_STEPS (their times include
start-up and the first allocations), each step's time, test accuracy and the process's peak RSS during the run.
`--repeats R` alternates the order of the two models from one repeat to the next. `--tiny` trains a tiny model for a
few steps on 400 images, on one thread: a check that it runs, not a measurement.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

import hydra
import lightning as L
import timm
import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch import Callback
from omegaconf import OmegaConf, open_dict
from timm.layers import LayerNorm, RmsNormFp32
from timm.models.vision_transformer import VisionTransformer

import zoo.entry  # noqa: F401  (registers the configs' resolvers)
from zoo.core.attention import QK_NORM_EPS
from zoo.entry.allocator import keep_freed_memory
from zoo.entry.builders import build_model_config, task_inputs
from zoo.entry.quiet import quiet

from .harness import Workload, intra_op_threads, median, run_interleaved
from .run import machine_name

RECIPE = "vit_mnist_fast"
TIMM_BLOCK = "timm.models.vision_transformer.Block"
MODELS = ("zoo", "timm")
WARMUP_STEPS = 20
TINY_STEPS = 6
# Tiny sizes: a model of two narrow blocks on 400/50/50 images (the test fixtures hold 1000, the data folder 10000).
TINY_OVERRIDES = [
    "model.net.embed_dim=32",
    "model.net.depth=2",
    "model.net.num_heads=2",
    "model.net.mlp_dim=64",
    "data.batch_size=16",
    "data.eval_batch_size=50",
    "data.split_sizes=[400,50,50]",
    "model.scheduler.warmup_steps=2",
]
PRECISION_DTYPES = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=None, help=f"training steps (default: the recipe's; {TINY_STEPS} tiny)")
    p.add_argument("--repeats", type=int, default=1, help="runs of each model, the order alternating between repeats")
    p.add_argument("--order", default="zoo,timm", help="which model runs first in the first repeat")
    p.add_argument("--timm-fused", choices=("auto", "true", "false"), default="auto")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: as set; 1 with --tiny)")
    p.add_argument("--json", default="benchmarks/results/end_to_end.json")
    p.add_argument("--tiny", action="store_true", help="tiny sizes, a few steps: a check that it runs")
    args = p.parse_args(argv)
    order = [m.strip() for m in args.order.split(",")]
    if sorted(order) != sorted(MODELS):
        p.error(f"--order must name zoo and timm once each (e.g. --order timm,zoo), got {args.order!r}")
    args.order = order
    if args.repeats < 1:
        p.error(f"--repeats must be at least 1, got {args.repeats}")
    if args.steps is not None and args.steps < 2:
        p.error(f"--steps must be at least 2 (one step is timed after another), got {args.steps}")
    if args.threads is not None and args.threads < 1:
        p.error(f"--threads must be at least 1, got {args.threads}")
    return args


# ---- the recipe, as train.py composes it ----------------------------------------------------------------------
def recipe_config(output_dir: Path, *, steps: int | None, tiny: bool):
    """The composed `train` config of experiment=vit_mnist_fast (with the tiny sizes, and `steps` steps with the
    validation at the last one, as the recipe has it)."""
    overrides = [f"experiment={RECIPE}", *(TINY_OVERRIDES if tiny else [])]
    if steps is None and tiny:
        steps = TINY_STEPS
    if steps is not None:
        overrides += [f"trainer.max_steps={steps}", f"trainer.val_check_interval={steps}"]
    GlobalHydra.instance().clear()
    with initialize_config_module(config_module="zoo.conf", version_base="1.3"):
        cfg = compose(config_name="train", overrides=overrides, return_hydra_config=True)
    GlobalHydra.instance().clear()
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        cfg.paths.output_dir = str(output_dir)
    return cfg


def training_dtype(cfg) -> torch.dtype:
    return PRECISION_DTYPES.get(str(cfg.trainer.precision), torch.float32)


def zoo_network(cfg, datamodule):
    return hydra.utils.instantiate(build_model_config(cfg.model.net, datamodule), _convert_="all")


def timm_network(zoo_net, fused: bool) -> torch.nn.Module:
    """timm's VisionTransformer with the architecture of `zoo_net` (a zoo ViT), its attention modules set to
    `fused` (timm's per-module switch; timm.layers.set_fused_attn only reaches modules built after it)."""
    c = zoo_net.config
    other = {k: v for k, v in zoo_net.nondefault_switches().items() if k != "qk_norm"}
    if other:
        raise ValueError(
            f"timm's VisionTransformer has no counterpart of zoo's switches {other}; compare the plain ViT (with or "
            "without qk_norm)"
        )
    model = VisionTransformer(
        img_size=c.image_size,
        patch_size=c.patch_size,
        in_chans=c.in_channels,
        num_classes=c.num_classes,
        global_pool="avg" if c.pool == "avg" else "token",
        class_token=c.class_token,
        embed_dim=c.embed_dim,
        depth=c.depth,
        num_heads=c.num_heads,
        mlp_ratio=c.mlp_dim / c.embed_dim,
        qkv_bias=True,
        qk_norm=c.qk_norm,
        norm_layer=functools.partial(LayerNorm, eps=c.norm_eps),
        drop_rate=c.dropout,
        pos_drop_rate=c.dropout,
        proj_drop_rate=c.dropout,
        attn_drop_rate=c.attn_dropout,
    )
    for module in model.modules():
        if hasattr(module, "fused_attn"):
            module.fused_attn = fused
        if c.qk_norm and hasattr(module, "q_norm"):
            module.q_norm = RmsNormFp32(module.head_dim, eps=QK_NORM_EPS)
            module.k_norm = RmsNormFp32(module.head_dim, eps=QK_NORM_EPS)
    return model


def build_task(cfg, which: str, datamodule, fused: bool):
    """The recipe's task around zoo's network or timm's. The task is made with zoo's network (it reads the class
    count from its config) and then handed timm's; MuonWithAdamW is told timm's block class."""
    net = zoo_network(cfg, datamodule)
    model_cfg = cfg.model
    if which == "timm":
        model_cfg = copy.deepcopy(cfg.model)
        OmegaConf.update(model_cfg, "optimizer.block_types", [TIMM_BLOCK], force_add=True)
    task = hydra.utils.instantiate(model_cfg, net=net, **task_inputs(datamodule), _convert_="all")
    if which == "timm":
        task.net = timm_network(net, fused)
    return task


def parameter_count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def optimizer_layout(optimizer) -> dict:
    """Per inner optimizer (muon, adamw) of a MuonWithAdamW, or the optimizer itself: each group's weight decay,
    tensor and parameter counts, and the shapes Muon orthogonalizes (sorted)."""
    inner = {"muon": optimizer.muon, "adamw": optimizer.adamw} if hasattr(optimizer, "muon") else {"all": optimizer}
    layout = {}
    for name, opt in inner.items():
        groups = [] if opt is None else opt.param_groups
        layout[name] = [
            {
                "weight_decay": float(g["weight_decay"]),
                "tensors": len(g["params"]),
                "parameters": sum(p.numel() for p in g["params"]),
            }
            for g in groups
        ]
        if name == "muon" and opt is not None:
            layout["muon_shapes"] = sorted(list(p.shape) for g in groups for p in g["params"])
    return layout


def check_same_model(cfg, datamodule) -> dict:
    """Both tasks built once before any training: the same parameter count and the same optimizer groups, else a
    ValueError naming the difference. Returns the counts and the layout."""
    tasks = {which: build_task(cfg, which, datamodule, fused=True) for which in MODELS}
    counts = {which: parameter_count(task.net) for which, task in tasks.items()}
    if counts["zoo"] != counts["timm"]:
        raise ValueError(
            f"zoo's ViT has {counts['zoo']:,} parameters and timm's {counts['timm']:,}: not the same architecture; "
            "see timm_network in benchmarks/end_to_end.py"
        )
    optimizers = {which: task.configure_optimizers()["optimizer"] for which, task in tasks.items()}
    layouts = {which: optimizer_layout(optimizer) for which, optimizer in optimizers.items()}
    if layouts["zoo"] != layouts["timm"]:
        raise ValueError(f"the optimizer groups differ: zoo {layouts['zoo']}, timm {layouts['timm']}")
    return {"parameters": counts, "optimizer": type(optimizers["zoo"]).__name__, "optimizer_groups": layouts["zoo"]}


# ---- timm's fastest attention setting ------------------------------------------------------------------------
def probe_timm_attention(cfg, datamodule, dtype: torch.dtype, *, tiny: bool) -> dict:
    """Median train-step seconds of timm fused / unfused (and zoo's, for the step-level ratio) on a batch of the
    recipe's shape, interleaved in this process (benchmarks.harness; plain AdamW, not the recipe's optimizer)."""
    zoo_net = zoo_network(cfg, datamodule)
    c = zoo_net.config
    batch_size = int(cfg.data.batch_size)

    def batch():
        generator = torch.Generator().manual_seed(0)
        images = torch.randn(batch_size, c.in_channels, c.image_size, c.image_size, generator=generator)
        return images, torch.randint(0, c.num_classes, (batch_size,), generator=generator)

    def loss(model, b):
        return F.cross_entropy(model(b[0]).float(), b[1])

    def forward(model, b):
        return model(b[0])

    workloads = [
        Workload("zoo", lambda: zoo_network(cfg, datamodule), batch, loss, forward),
        Workload("timm-fused", lambda: timm_network(zoo_net, True), batch, loss, forward, family="timm"),
        Workload("timm-unfused", lambda: timm_network(zoo_net, False), batch, loss, forward, family="timm"),
    ]
    steps, warmup, rounds = (1, 1, 1) if tiny else (3, 3, 3)
    prepared = run_interleaved(workloads, torch.device("cpu"), dtype, steps=steps, warmup=warmup, rounds=rounds)
    return {p.workload.name: median(p.train_times) for p in prepared}


# ---- one training run ----------------------------------------------------------------------------------------
class StepLog(Callback):
    """The time at the end of every training step (before any validation that follows it), and a checksum of the
    batches trained on (images and targets summed), which must be the same for both networks."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.checksum = 0.0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.times.append(time.perf_counter())
        self.checksum += sum(float(t.double().sum()) for t in batch)


def _reset_peak_rss() -> None:
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the high-water mark restarts from the current resident set


def _peak_rss_mb() -> float | None:
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return None


def train_once(cfg, which: str, fused: bool) -> dict:
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    datamodule = hydra.utils.instantiate(cfg.data, _convert_="all")
    task = build_task(cfg, which, datamodule, fused)
    log = StepLog()
    trainer = hydra.utils.instantiate(
        cfg.trainer,
        callbacks=[log],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    # The networks' initializations draw different amounts of randomness: seeded again, both runs draw the same
    # batches and augmentations.
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    _reset_peak_rss()
    start, cpu_start = time.perf_counter(), time.process_time()
    trainer.fit(task, datamodule=datamodule)
    fitted, cpu_fitted = time.perf_counter(), time.process_time()
    tested = trainer.test(task, datamodule=datamodule, verbose=False)
    end = time.perf_counter()
    times = log.times
    warmup = min(WARMUP_STEPS, len(times) // 2)  # the steps before the clock starts (at least one)
    timed = len(times) - warmup
    return {
        "model": which,
        "network": f"{type(task.net).__module__}.{type(task.net).__name__}",
        "steps": int(trainer.global_step),
        "steps_clocked": len(times),
        "fit_s": fitted - start,
        "run_s": end - start,
        "test_s": end - fitted,
        # CPU seconds of this process over the fit (all its threads): far below fit_s x threads, the process waited
        # for the processor, i.e. the machine was busy with something else.
        "fit_cpu_s": cpu_fitted - cpu_start,
        "untimed_steps": warmup,
        "timed_steps": timed,
        "steps_per_s": timed / (times[-1] - times[warmup - 1]) if timed > 0 and warmup > 0 else None,
        "test_acc": float(tested[0]["test/acc"]),
        "peak_rss_mb": _peak_rss_mb(),
        "optimizer_groups": optimizer_layout(trainer.optimizers[0]),
        "data_checksum": log.checksum,
        "step_s": [round(b - a, 6) for a, b in zip(times, times[1:])],  # from the end of one step to the next's
    }


# ---- the report ----------------------------------------------------------------------------------------------
def summarize(runs: list[dict]) -> dict:
    out = {}
    for which in MODELS:
        mine = [r for r in runs if r["model"] == which]
        out[which] = {
            key: statistics.median(r[key] for r in mine)
            for key in ("fit_s", "fit_cpu_s", "run_s", "steps_per_s", "test_acc", "peak_rss_mb")
            if all(r[key] is not None for r in mine)
        }
    out["fit_ratio_zoo_over_timm"] = out["zoo"]["fit_s"] / out["timm"]["fit_s"]
    out["run_ratio_zoo_over_timm"] = out["zoo"]["run_s"] / out["timm"]["run_s"]
    if "steps_per_s" in out["zoo"] and "steps_per_s" in out["timm"]:
        out["step_time_ratio_zoo_over_timm"] = out["timm"]["steps_per_s"] / out["zoo"]["steps_per_s"]
    return out


def machine() -> dict:

    return {
        "cpu": machine_name(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "torch": torch.__version__,
        "timm": timm.__version__,
        "lightning": L.__version__,
    }


# (heading, summary key, width, format) of the printed table
COLUMNS = (
    ("fit s", "fit_s", 8, ".1f"),
    ("fit CPU s", "fit_cpu_s", 9, ".1f"),
    ("fit+test s", "run_s", 10, ".1f"),
    ("steps/s", "steps_per_s", 8, ".2f"),
    ("test acc", "test_acc", 8, ".4f"),
    ("peak RSS MB", "peak_rss_mb", 11, ".0f"),
)


def print_report(result: dict) -> None:
    s, m = result["summary"], result["machine"]
    print(
        f"# {RECIPE}, {result['steps']} steps, {result['precision']}, {m['cpu']} ({m['cpu_capability']}, "
        f"{m['threads']} threads); optimizer {result['optimizer']}; timm {result['timm_attention']}"
    )
    print(f"# parameters: zoo {result['parameters']['zoo']:,}, timm {result['parameters']['timm']:,}")
    print(f"{'model':6}" + "".join(f" {heading:>{width}}" for heading, _, width, _ in COLUMNS))
    for which in MODELS:
        row = s[which]
        print(f"{which:6}" + "".join(f" {row.get(key, float('nan')):{width}{how}}" for _, key, width, how in COLUMNS))
    line = f"zoo/timm wall time: fit {s['fit_ratio_zoo_over_timm']:.3f}, fit+test {s['run_ratio_zoo_over_timm']:.3f}"
    if "step_time_ratio_zoo_over_timm" in s:
        untimed = result["runs"][0]["untimed_steps"]
        line += f"; step time (first {untimed} steps untimed) {s['step_time_ratio_zoo_over_timm']:.3f}"
    print(line)
    if not result["same_data"]:
        print("WARNING: the runs trained on different batches (data_checksum differs); the comparison is void")


def run(args: argparse.Namespace) -> dict:
    quiet()
    keep_freed_memory()  # as train.py: freed activations are reused, not returned to the system at every step
    threads = args.threads if args.threads is not None else (1 if args.tiny else None)
    with intra_op_threads(threads), tempfile.TemporaryDirectory(prefix="zoo-end-to-end-") as output_dir:
        cfg = recipe_config(Path(output_dir), steps=args.steps, tiny=args.tiny)
        dtype = training_dtype(cfg)
        datamodule = hydra.utils.instantiate(cfg.data, _convert_="all")
        same = check_same_model(cfg, datamodule)
        probe = None
        if args.timm_fused == "auto":
            probe = probe_timm_attention(cfg, datamodule, dtype, tiny=args.tiny)
            fused = probe["timm-fused"] <= probe["timm-unfused"]
            how = "chosen by the step probe"
        else:
            fused, how = args.timm_fused == "true", "given by --timm-fused"
        runs = []
        for repeat in range(args.repeats):
            order = args.order if repeat % 2 == 0 else args.order[::-1]
            for which in order:
                runs.append({"repeat": repeat, **train_once(cfg, which, fused)})
        result = {
            "recipe": RECIPE,
            "command": shlex.join(["python", "-m", "benchmarks.end_to_end", *args.argv]),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "machine": machine(),
            "tiny": args.tiny,
            "steps": int(cfg.trainer.max_steps),
            "precision": str(cfg.trainer.precision),
            "batch_size": int(cfg.data.batch_size),
            "seed": int(cfg.seed),
            **same,
            "timm_attention": f"fused_attn={fused} ({how})",
            "timm_fused": fused,
            "step_probe_s": probe,
            "order": args.order,
            "repeats": args.repeats,
            "same_data": len({r["data_checksum"] for r in runs}) == 1,
            "runs": runs,
            "summary": summarize(runs),
        }
    return result


def main(argv=None) -> dict:
    args = parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    result = run(args)
    print_report(result)
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written: {path}")
    return result


if __name__ == "__main__":
    main()
