"""Measurement jobs: a sweep point that times a model instead of training it, with the same result.json. A lab config
sets `measure: {_target_: zoo.lab.measure.measure.<function>, ...}`; train.py builds the data and the model and calls
it, and it returns (metrics, record). A measurement that compares times builds every arm of its `arms` grid in its job
and times them interleaved (zoo/lab/measure/timing.py); the record lists each arm with its parameters."""

from __future__ import annotations

import dataclasses
import itertools
import time
from statistics import median

import torch

from zoo.core import KVCache

from . import timing
from .memory import count_saved_tensors, cuda_peak_mb


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _text(datamodule, batch: int, length: int, device) -> torch.Tensor:
    """(batch, length + 1) consecutive validation tokens from random offsets (seeded by the job's seed)."""
    tokens = datamodule.val_dataloader().dataset.tokens
    if len(tokens) <= length + 1:
        raise ValueError(f"the validation split has {len(tokens)} tokens, too few for a window of {length}")
    starts = torch.randint(0, len(tokens) - length - 1, (batch,)).tolist()
    rows = [torch.from_numpy(tokens[s : s + length + 1].astype("int64")) for s in starts]
    return torch.stack(rows).to(device)


def _context(net) -> int | None:
    return getattr(getattr(net, "config", None), "block_size", None)


def _check_length(net, length: int, option: str) -> None:
    context = _context(net)
    if context is not None and length > context:
        raise ValueError(f"{option}={length} is longer than the model's context model.net.block_size={context}")


def _train_step(net, text):
    def step():
        loss = net.loss(text[:, :-1], text[:, 1:])
        loss.backward()
        net.zero_grad(set_to_none=True)

    return step


@torch.no_grad()
def _decode_times(net, prompt: torch.Tensor, new_tokens: int, use_cache: bool, dev) -> list[float]:
    """Seconds per generated token, greedy; without the cache each step recomputes the whole sequence so far."""
    net.eval()
    cache = KVCache(net.config.n_layer) if use_cache else None
    tokens, times = prompt, []
    step_input = prompt
    for _ in range(new_tokens):
        start = time.perf_counter()
        logits = net(step_input, cache=cache) if use_cache else net(tokens)
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        times.append(time.perf_counter() - start)
        tokens = torch.cat([tokens, nxt], dim=1)
        step_input = nxt
    return times


def decoding(
    net,
    datamodule,
    *,
    arms: dict[str, list] | None = None,
    prompt_len: int = 16,
    new_tokens: int = 240,
    train_batch: int = 12,
    rounds: int = 3,
    warmup: int = 1,
    device: str = "auto",
) -> tuple[dict, dict]:
    """Time per generated token against its position (batch 1, greedy), with and without the KV cache (the arms),
    and a training step's tokens/s at the model's full context, all interleaved in one process."""
    grid = arm_grid(arms or {"use_cache": [True, False]})
    if any(set(arm) != {"use_cache"} for arm in grid):
        raise ValueError(f"measure.arms takes exactly use_cache, got {', '.join(arms)}")
    use_cache = [bool(arm["use_cache"]) for arm in grid]
    context = _context(net)
    _check_length(net, prompt_len + new_tokens, "measure.prompt_len + new_tokens")
    dev = _device(device)
    net.to(dev)
    prompt = _text(datamodule, 1, prompt_len, dev)[:, :prompt_len]
    train_len = context or prompt_len + new_tokens
    text = _text(datamodule, train_batch, train_len, dev)
    per_token: dict[bool, list[list[float]]] = {cached: [] for cached in use_cache}

    def generate(cached: bool):
        def run():  # the arm keeps its per-token times; the timer times the whole generation
            per_token[cached].append(_decode_times(net, prompt, new_tokens, cached, dev))

        return run

    def train():
        net.train()
        _train_step(net, text)()

    arms = {**{cached: generate(cached) for cached in use_cache}, "train": train}
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else None
    found = timing.interleave(arms, rounds=rounds, warmup=warmup, sync=sync)
    train_rate = train_batch * train_len / found["train"].median
    job = {**timing.load(), **found["train"].metrics("lab/train_step_ms"), "lab/train_tokens_per_sec": train_rate}
    records = []
    for cached in use_cache:
        # per position, the median over the timed rounds (the warm-up's generations are left out)
        by_position = [median(ts) for ts in zip(*per_token[cached][warmup:])]
        tenth = max(1, new_tokens // 10)
        first, last = sum(by_position[:tenth]) / tenth, sum(by_position[-tenth:]) / tenth
        whole = found[cached]
        decode_rate = new_tokens / whole.median
        metrics = {
            **whole.metrics("lab/decode_ms_per_token", scale=1000 / new_tokens),
            # numbers read off the same generations: contended when their timing was
            **timing.derived("lab/decode_ms_first", 1000 * first, whole),
            **timing.derived("lab/decode_ms_last", 1000 * last, whole),
            **timing.derived("lab/decode_growth", last / first, whole),
            **timing.derived("lab/decode_tokens_per_sec", decode_rate, whole),
            # tokens/s of training over decoding: per token, a generated token's time over a trained token's
            **timing.ratio("lab/train_over_decode", whole, found["train"]),
        }
        metrics["lab/train_over_decode"] *= train_batch * train_len / new_tokens
        series = {"decode_ms_by_position": [1000 * t for t in by_position]}
        records.append({"params": {"use_cache": cached}, "metrics": metrics, "series": series})
    return job, {"metrics": job, "arms": records}


def arm_grid(arms: dict[str, list]) -> list[dict]:
    """{parameter: [values]} -> every combination, in the grid's order: the arms of one interleaved job."""
    if not arms or not all(isinstance(v, list) and v for v in arms.values()):
        raise ValueError(f"measure.arms must map each arm parameter to a non-empty list of values, got {arms}")
    return [dict(zip(arms, combo)) for combo in itertools.product(*arms.values())]


def interleaved_attention_cost(
    net,
    datamodule,
    *,
    arms: dict[str, list],
    variants: dict[str, dict],
    batch_size: int = 1,
    rounds: int = 5,
    warmup: int = 1,
    device: str = "auto",
) -> tuple[dict, dict]:
    """One training step of a causal LM per arm ({variant: [...], seq_len: [...]}; a variant is `net` with the config
    fields `variants[name]`), timed interleaved, with tokens/s and the memory saved for backward."""
    grid = arm_grid(arms)
    if any(set(arm) != {"variant", "seq_len"} for arm in grid):
        raise ValueError(f"measure.arms takes exactly variant and seq_len, got {', '.join(arms)}")
    unknown = sorted({arm["variant"] for arm in grid} - set(variants))
    if unknown:
        raise ValueError(f"measure.arms.variant: {', '.join(unknown)} not in lab.variants ({', '.join(variants)})")
    dev = _device(device)
    nets = {}  # one model per variant, shared by its lengths: weights do not change what a step costs
    for name in dict.fromkeys(arm["variant"] for arm in grid):
        nets[name] = type(net)(dataclasses.replace(net.config, **variants[name])).to(dev).train()
    steps, saved = {}, {}
    for arm in grid:
        _check_length(nets[arm["variant"]], arm["seq_len"], "measure.arms.seq_len")
        text = _text(datamodule, batch_size, arm["seq_len"], dev)
        label = f"{arm['variant']}@{arm['seq_len']}"
        steps[label] = _train_step(nets[arm["variant"]], text)
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
        with count_saved_tensors(nets[arm["variant"]]) as counter:
            loss = nets[arm["variant"]].loss(text[:, :-1], text[:, 1:])
        loss.backward()
        nets[arm["variant"]].zero_grad(set_to_none=True)
        saved[label] = {"lab/saved_mb": counter.bytes / 2**20}
        if (peak := cuda_peak_mb(dev)) is not None:
            saved[label]["lab/cuda_peak_mb"] = peak
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else None
    timings = timing.interleave(steps, rounds=rounds, warmup=warmup, sync=sync)
    records = []
    for arm, (label, t) in zip(grid, timings.items()):
        metrics = {**t.metrics("lab/step_ms"), **saved[label]}
        metrics["lab/tokens_per_sec"] = batch_size * arm["seq_len"] / t.median
        records.append({"params": arm, "metrics": metrics})
    job = {**timing.load(), "lab/timing_spread_max": max(t.spread for t in timings.values())}
    return job, {"metrics": job, "arms": records}
