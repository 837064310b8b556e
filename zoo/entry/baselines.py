"""`zoo-baselines` (or `python -m zoo.baselines data=...`): the interpolated Kneser-Ney 1- to 5-gram losses of a text
data config's validation split, fitted on its training split (zoo/conf/baselines.yaml): the reference lines of the
results tables and the lab. The data module is the one training builds, so the tokens and the split are exactly
those `train.py data=<same>` trains and validates on."""

from __future__ import annotations

import json
from pathlib import Path

import hydra
import numpy as np
from omegaconf import DictConfig

from zoo.lab.decide import baselines as ngram


def measure(cfg: DictConfig) -> dict:
    """{"data": ..., "orders": {k: loss}, ...} for the data config of `cfg` (loss in nats per predicted token)."""
    orders, method = int(cfg.baselines.orders), str(cfg.baselines.method)
    if method not in ngram.METHODS:
        raise ValueError(f"baselines.method={method!r}: choose one of {', '.join(ngram.METHODS)}")
    if orders < 1:
        raise ValueError(f"baselines.orders={orders}: give an order of at least 1 (5 gives the 1- to 5-gram)")
    data = hydra.utils.instantiate(cfg.data)
    if not hasattr(data, "tokens"):
        raise ValueError(
            f"data={type(data).__name__} holds no token stream: n-gram lines are for language-model text data "
            "(shakespeare_char, shakespeare_bpe, text_files, token_shards)"
        )
    try:
        ngram.check_fits(orders, data.vocab_size)
    except ValueError as error:
        raise ValueError(f"baselines.orders={orders}: {error}; pass a lower baselines.orders") from None
    data.build_splits()
    train, val = np.asarray(data.tokens("train")), np.asarray(data.tokens("val"))
    result = ngram.baselines(train, val, data.vocab_size, orders, method)
    return {
        "data": str(cfg.data.get("dataset") or list(cfg.data.get("text_files") or []) or cfg.data.get("shards")),
        "tokenizer": str(cfg.data.get("tokenizer")),
        "vocab_size": int(data.vocab_size),
        "train_tokens": len(train),
        "val_tokens": len(val),
        "method": method,
        "scored": result.scored,
        "losses": {str(k): v for k, v in result.losses.items()},
    }


def report(record: dict) -> str:
    lines = [
        f"{record['data']} ({record['tokenizer']}, vocab {record['vocab_size']}): train {record['train_tokens']:,} "
        f"tokens, val {record['val_tokens']:,}; {record['method']}, {record['scored']}",
        "order    val loss (nats/token)",
    ]
    lines += [f"{ngram.order_name(int(k)):<8} {v:.4f}" for k, v in record["losses"].items()]
    return "\n".join(lines)


def run(cfg: DictConfig) -> dict:
    record = measure(cfg)
    print(report(record))
    if cfg.baselines.output:
        path = Path(str(cfg.baselines.output))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=1) + "\n")
    return record
