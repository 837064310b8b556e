"""Metric names in words for the report's tables and plots (`probe/attn/logit_var/mean@init` reads "variance of the
attention logits at init (mean over layers)"): the question's `lab.metric_names`, else an exact name (NAMES), else a
probe family (`probe/<quantity>/<layer or mean>[@init|@last]`, QUANTITIES), else the raw key."""

from __future__ import annotations

import re

# Whole metric names (logged by the tasks, the measurement jobs and the lab's callbacks).
NAMES = {
    "val/loss": "validation loss in nats per token",
    "val/acc": "validation accuracy",
    "val/bleu": "validation BLEU",
    "val/ppl": "validation perplexity",
    "train/acc": "training accuracy",
    "lab/loss_start": "training loss, first steps",
    "lab/loss_end": "training loss, last steps",
    "lab/diverged": "diverged: 1, else 0",
    "lab/nonfinite_steps": "fraction of steps with a non-finite loss",
    "lab/step_ms": "median training step time in ms",
    "lab/tokens_per_sec": "training tokens per second",
    "lab/saved_mb": "activation memory of a training step in MiB",
    "lab/cuda_peak_mb": "CUDA peak memory in MiB",
    "lab/infer_ms": "inference time in ms",
    "lab/infer_ms_folded": "inference time with BatchNorm folded, in ms",
    "lab/fold_speedup": "speed-up from folding BatchNorm",
    "lab/fold_max_diff": "largest logit difference after folding",
    "lab/batchnorms": "BatchNorm layers",
    "lab/decode_ms_per_token": "decoding time per token in ms",
    "lab/decode_ms_first": "decoding time of the first token in ms",
    "lab/decode_ms_last": "decoding time of the last token in ms",
    "lab/decode_growth": "decoding time, last token over first",
    "lab/decode_tokens_per_sec": "decoded tokens per second",
    "lab/train_over_decode": "training throughput over decoding throughput",
    "probe/grad/first_over_last": "first block's gradient norm over the last block's",
    "probe/grad/total": "total gradient norm",
}
NAMES["lab/train_tokens_per_sec"] = NAMES["lab/tokens_per_sec"]
NAMES |= {f"probe/cost/{k}": NAMES[f"lab/{k}"] for k in ("step_ms", "saved_mb", "cuda_peak_mb")}

# probe/<quantity>/<layer or group>: what the quantity is.
QUANTITIES = {
    "attn/logit_var": "variance of the attention logits",
    "attn/entropy": "attention entropy",
    "attn/max_prob": "largest attention probability",
    "attn/diag_mass": "attention a token gives itself",
    "grad": "gradient norm",
    "grad_group": "gradient norm",
    "act_rms": "RMS of the block outputs",
    "ffn_zero": "fraction of FFN activations exactly 0",
    "ffn_near_zero": "fraction of FFN activations near 0",
    "bn/mean_std": "fluctuation of the BatchNorm batch mean",
    "bn/var_std": "fluctuation of the BatchNorm batch variance",
    "bn/mean_dev": "BatchNorm batch mean vs running mean",
    "bn/var_dev": "BatchNorm batch variance vs running variance",
}
GROUPS = {
    "attn.q": "W_q",
    "attn.k": "W_k",
    "attn.v": "W_v",
    "attn.out": "the attention output",
    "ffn": "the FFN",
    "norm": "the norms",
    "embedding": "the embeddings",
    "head": "the head",
}
WHEN = {"init": "at init", "last": "at the end"}
_LENGTH = re.compile(r"^lab/loss(_beyond)?@([0-9.]+)x$")


def _where(part: str) -> str:
    """The layer or group part of a probe metric in words."""
    if part == "mean":
        return "mean over layers"
    if part in GROUPS:
        return GROUPS[part]
    layer = re.fullmatch(r"(?:(\w+)\.)?l(\d+)(\.cross)?", part)
    if layer:
        stack, number, cross = layer.groups()
        return " ".join(filter(None, [stack, "cross-attention" if cross else None, f"layer {number}"]))
    return part


def _described(metric: str) -> str | None:
    """The words for a raw key, or None when nothing here names it."""
    base, _, when = metric.partition("@")
    at = f" {WHEN[when]}" if when in WHEN else (f" @{when}" if when else "")
    if base in NAMES and not _LENGTH.match(metric):
        return NAMES[base] + at
    length = _LENGTH.match(metric)
    if length:
        beyond, factor = length.groups()
        part = "positions past the training length" if beyond else "all positions"
        return f"validation loss at {factor}x the training length ({part})"
    if not base.startswith("probe/"):
        return None
    rest = base[len("probe/") :]
    for quantity in sorted(QUANTITIES, key=len, reverse=True):  # the longest family first: grad_group before grad
        if rest.startswith(quantity + "/"):
            part = rest[len(quantity) + 1 :]
            if quantity == "grad" and part.endswith("first_over_last"):  # encoder.first_over_last: one stack's
                stack = part.split(".")[0] + " " if "." in part else ""
                return f"first {stack}block's gradient norm over the last {stack}block's{at}"
            where = _where(part)
            if quantity == "grad_group":
                return f"gradient norm of {where}{at}"
            return f"{QUANTITIES[quantity]}{at} ({where})"
    return None


def describe(metric: str, lab: dict | None = None) -> str:
    """The metric in words: the question's `lab.metric_names`, else the defaults here, else the raw key."""
    own = (lab or {}).get("metric_names") or {}
    if metric in own:
        return str(own[metric])
    return _described(metric) or metric


def header(metric: str, lab: dict | None = None) -> str:
    """The words with the raw key in parentheses (the raw key alone when there are no words for it)."""
    words = describe(metric, lab)
    return metric if words == metric else f"{words} (`{metric}`)"
