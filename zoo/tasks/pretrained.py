"""Starting a task's network from a pretrained model (`model.pretrained=<path>`): a zoo checkpoint (.ckpt) or
published files that zoo.interop reads. Its architecture wins over `model.net`, whose fields that disagree with it
are refused in one line; what the run decides stays the run's (dropout, compute options, what the data fills in).
Once a checkpoint holds the network the path is not read again (`ZooTask.not_rebuilt`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from zoo.checkpointing.reading import load_model_from_checkpoint
from zoo.core.switches import ComputeOptions
from zoo.data.tokenizer import load_published_tokenizer, published_tokenizer_files, tokenizer_from_json
from zoo.models import ZooModel

# How the core computes: the run's choice, never the pretrained model's.
COMPUTE_OPTIONS = frozenset(f.name for f in dataclasses.fields(ComputeOptions))


def load_pretrained(
    path: str | Path, model_cls: type[ZooModel], read: Callable[[Path], ZooModel], *, formats: str
) -> tuple[ZooModel, str | None]:
    """The model at `path`, with the tokenizer JSON a zoo checkpoint stores (None for published files, whose
    tokenizer lies beside them). A .ckpt file is a zoo checkpoint; anything else is given to `read` (the model's
    importer). `formats` says what may be given, for the messages."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"pretrained model not found: {path.resolve()}; check model.pretrained: give {formats}")
    try:
        if path.is_file() and path.suffix == ".ckpt":
            model, info = load_model_from_checkpoint(path)
            tokenizer = info.get("tokenizer")
        else:
            model, tokenizer = read(path), None
    except (ValueError, FileNotFoundError) as error:
        raise type(error)(f"model.pretrained={path}: {error}; it takes {formats}") from None
    if not isinstance(model, model_cls):
        raise ValueError(f"model.pretrained={path} holds a {type(model).__name__}, not a {model_cls.__name__}")
    return model, tokenizer


def check_architecture(net: ZooModel, source: ZooModel, pretrained, *, keep: Iterable[str], what: str) -> None:
    """Refuse, in one line naming them, the fields `net` was asked for (its overrides and lab switches) that differ
    from the pretrained model's: silently dropped, they would make another experiment than the one asked for.
    `keep`: the fields the run decides, not compared (nor are the compute options)."""
    asked = {**net.config_overrides, **net.nondefault_switches()}
    ignored = set(keep) | COMPUTE_OPTIONS
    theirs = source.config
    differing = {k: v for k, v in asked.items() if k not in ignored and hasattr(theirs, k) and getattr(theirs, k) != v}
    if differing:
        listed = ", ".join(f"{k}={v!r}" for k, v in differing.items())
        held = ", ".join(f"{k}={getattr(theirs, k)!r}" for k in differing)
        raise ValueError(
            f"model.net sets {listed} but the pretrained {what} {pretrained} has {held}; its architecture comes from "
            "the pretrained model: drop the setting from model.net (or start from a model that has it)"
        )


def run_options(net: ZooModel, names: Iterable[str]) -> dict[str, Any]:
    """The fields of `net`'s config that the run decides (`names` and the compute options)."""
    wanted = set(names) | COMPUTE_OPTIONS
    return {f.name: getattr(net.config, f.name) for f in dataclasses.fields(net.config) if f.name in wanted}


def vocabulary(tokenizer) -> dict[str, int] | str | None:
    """What identifies a tokenizer's ids: its token -> id table (tokenizers-based: BPE, WordPiece), or the
    characters of a character tokenizer."""
    if hasattr(tokenizer, "tokenizer"):
        return tokenizer.tokenizer.get_vocab()
    return getattr(tokenizer, "chars", None)


def pretrained_tokenizer(pretrained, stored: str | None):
    """The tokenizer that comes with a pretrained model: the one a zoo checkpoint stores, or the published one beside
    a directory's weights (tokenizer.json, or vocab.json + merges.txt); None where there is none."""
    if stored is not None:
        return tokenizer_from_json(stored)
    path = Path(pretrained)
    if path.is_dir() and published_tokenizer_files(path):
        return load_published_tokenizer(path)
    return None


def check_tokenizer(tokenizer, pretrained, stored: str | None, vocab_size: int) -> None:
    """The data's tokenizer must be the pretrained model's: the same vocabulary as the tokenizer it comes with,
    where it comes with one, and never more ids than the model has; otherwise (a directory without a tokenizer)
    exactly the model's vocab_size. None (a task built without data) is not checked."""
    if tokenizer is None:
        return
    fix = (
        "leave data.tokenizer unset (data.pretrained follows model.pretrained), or give the model's own tokenizer "
        "with data.tokenizer=<its tokenizer.json or directory>"
    )
    own = pretrained_tokenizer(pretrained, stored)
    if own is not None and vocabulary(own) != vocabulary(tokenizer):
        raise ValueError(
            f"the data's tokenizer ({tokenizer.vocab_size} tokens) is not the tokenizer of the pretrained model "
            f"{pretrained} ({own.vocab_size} tokens); {fix}"
        )
    if tokenizer.vocab_size > vocab_size or (own is None and tokenizer.vocab_size != vocab_size):
        raise ValueError(
            f"the data's tokenizer has {tokenizer.vocab_size} tokens but the pretrained model {pretrained} has "
            f"vocab_size={vocab_size}; {fix}"
        )


def rebuilt(source: ZooModel, **changes) -> ZooModel:
    """A new model of the pretrained one's class and config with `changes` applied (run options, a new class count),
    its weights not yet loaded."""
    return type(source)(dataclasses.replace(source.config, **changes))
