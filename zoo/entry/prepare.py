"""`zoo-prepare` (or `python -m zoo.prepare`): token shards for language-model training, made once from the files a
data config names (zoo/conf/prepare.yaml, zoo/data/prepare.py)."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from zoo.data.documents import PIECE_CHARS
from zoo.data.prepare import PrepareOptions, prepare_shards
from zoo.data.sources import resolve_dataset


def options_from_config(cfg: DictConfig) -> PrepareOptions:
    data, prep = cfg.data, cfg.prepare
    dataset, text_files = data.get("dataset"), data.get("text_files")
    if (dataset is None) == (text_files is None):
        raise ValueError("give exactly one of data.dataset (a named dataset) or data.text_files (your own files)")
    if dataset is not None:
        train = [
            str(p)
            for p in resolve_dataset(
                dataset, cfg.paths.data_dir, download_missing=data.get("download", False), cache_dir=cfg.paths.cache_dir
            )
        ]
    else:
        train = [str(Path(p).resolve()) for p in OmegaConf.to_container(text_files)]
    val_files = data.get("val_files")
    val = None if val_files is None else [str(Path(p).resolve()) for p in OmegaConf.to_container(val_files)]
    tokenizer = str(data.get("tokenizer", "bpe"))
    if tokenizer not in ("char", "bpe"):
        tokenizer = str(Path(tokenizer).resolve())
    return PrepareOptions(
        tokenizer=tokenizer,
        bpe_vocab_size=int(data.get("bpe_vocab_size", 4096)),
        val_fraction=float(data.get("val_fraction", 0.1)),
        seed=int(prep.split_seed),
        split=str(prep.get("split", "auto")),
        documents=str(prep.documents),
        text_field=str(prep.text_field),
        shard_tokens=int(prep.shard_tokens),
        tokenizer_sample_bytes=int(prep.tokenizer_sample_bytes),
        inputs={"train": train, "val": val},
    )


def prepare(cfg: DictConfig) -> dict:
    for key in ("shard_tokens", "batch_bytes", "piece_chars", "tokenizer_sample_bytes"):
        value = cfg.prepare.get(key, PIECE_CHARS if key == "piece_chars" else None)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"prepare.{key} must be a positive integer, got {value!r}")
    return prepare_shards(
        options_from_config(cfg),
        Path(cfg.prepare.output_dir),
        batch_bytes=cfg.prepare.batch_bytes,
        piece_chars=cfg.prepare.get("piece_chars", PIECE_CHARS),
    )
