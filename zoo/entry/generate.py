"""Sample text from a causal-LM checkpoint, or translate with a seq2seq (Transformer) checkpoint."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch
from torch.nn.utils.rnn import pad_sequence

from zoo.checkpointing.reading import load_model_from_checkpoint, read_checkpoint
from zoo.data import TranslationTokenizer, tokenizer_from_json
from zoo.data.text import decode_utf8


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Sample from a GPT checkpoint, or translate with a Transformer checkpoint, written by train.py."
    )
    p.add_argument("checkpoint", help="a .ckpt file, e.g. logs/.../checkpoints/last.ckpt")
    t = p.add_argument_group("translation (Transformer checkpoints)")
    t.add_argument("--source", action="append", metavar="SENTENCE", help="a sentence to translate; repeat for several")
    t.add_argument(
        "--input",
        metavar="FILE",
        help="a file of sentences to translate, one per line ('-' reads stdin); an empty line gives an empty one",
    )
    # Every option of a mode defaults to None, filled in after parsing: an option given for the other kind of
    # checkpoint is refused rather than silently ignored.
    t.add_argument("--beam-size", type=int, help="1 for greedy decoding (default: 5)")
    t.add_argument("--length-penalty", type=float, help="GNMT's alpha (default: 0.6)")
    t.add_argument(
        "--max-len-b", type=int, help="a translation has at most source length + this many tokens (default: 50)"
    )
    t.add_argument("--batch-size", type=int, help="sentences decoded together (default: 64)")
    s = p.add_argument_group("sampling (GPT checkpoints)")
    s.add_argument("--prompt", help="text to continue (default: a newline)")
    s.add_argument("--max-new-tokens", type=int, help=f"at most {MAX_NEW_TOKENS:,} (default: 200)")
    s.add_argument("--num-samples", type=int, help="(default: 1)")
    s.add_argument("--temperature", type=float, help="0 for greedy decoding (default: 0.8)")
    s.add_argument("--top-k", type=int, help="(default: 200)")
    s.add_argument("--top-p", type=float, help="(default: none)")
    s.add_argument("--seed", type=int, help="(default: 1337)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or mps (default: cpu)")
    args = p.parse_args(argv)
    args.given = [k for k in (*SAMPLING_DEFAULTS, *TRANSLATION_DEFAULTS) if getattr(args, k) is not None]
    for key, default in {**SAMPLING_DEFAULTS, **TRANSLATION_DEFAULTS}.items():
        if getattr(args, key) is None:
            setattr(args, key, default)
    return args


DEVICE_TYPES = ("cpu", "cuda", "mps")
# The translation options and their defaults; a GPT takes none of them, a Transformer none of the sampling options.
TRANSLATION_DEFAULTS = {"beam_size": 5, "length_penalty": 0.6, "max_len_b": 50, "batch_size": 64}
SAMPLING_DEFAULTS = {
    "prompt": "\n",
    "max_new_tokens": 200,
    "num_samples": 1,
    "temperature": 0.8,
    "top_k": 200,
    "top_p": None,
    "seed": 1337,
}
# The samples print once complete: a typo's extra zeros would run for days without a line of output.
MAX_NEW_TOKENS = 1_000_000


def check_device(name: str) -> torch.device:
    """The device named by --device, refused in one line when torch does not know it or this machine lacks it."""
    try:
        device = torch.device(name)
    except RuntimeError:
        device = None
    if device is None or device.type not in DEVICE_TYPES:
        raise ValueError(f"--device {name!r} is not a device generate.py runs on; use cpu, cuda, cuda:N or mps")
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(f"--device {name}: this machine has no usable CUDA GPU; use --device cpu")
        if device.index is not None and device.index >= count:
            raise ValueError(f"--device {name}: this machine has {count} CUDA GPU(s) (cuda:0..cuda:{count - 1})")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"--device {name}: MPS (Apple GPU) is not available here; use --device cpu")
    return device


def check_options(args: argparse.Namespace) -> None:
    """Every option checked before the checkpoint is read, so a typo costs no model load."""
    check_device(args.device)
    if not math.isfinite(args.temperature) or args.temperature < 0:
        raise ValueError(f"--temperature must be a finite number >= 0 (0: greedy), got {args.temperature}")
    if args.top_k is not None and args.top_k < 1:
        raise ValueError(f"--top-k must be >= 1, got {args.top_k}")
    if args.top_p is not None and not 0.0 < args.top_p <= 1.0:  # also refuses nan
        raise ValueError(f"--top-p must be in (0, 1], got {args.top_p}")
    if not 0 <= args.max_new_tokens <= MAX_NEW_TOKENS:
        raise ValueError(
            f"--max-new-tokens must be between 0 and {MAX_NEW_TOKENS:,} (the samples print only once complete), "
            f"got {args.max_new_tokens:,}"
        )
    if args.num_samples <= 0:
        raise ValueError(f"--num-samples must be positive, got {args.num_samples}")
    if args.beam_size < 1:
        raise ValueError(f"--beam-size must be >= 1 (1: greedy decoding), got {args.beam_size}")
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.max_len_b < 0:
        raise ValueError(f"--max-len-b must be >= 0, got {args.max_len_b}")
    if not math.isfinite(args.length_penalty):
        raise ValueError(f"--length-penalty must be a finite number, got {args.length_penalty}")


def _refuse_given(args: argparse.Namespace, options: dict, given_for: str, instead: str) -> None:
    """Refuse the options of the other kind of checkpoint: ignoring them would look as if they had been applied."""
    given = [f"--{k.replace('_', '-')}" for k in args.given if k in options]
    if given:
        verb = "is" if len(given) == 1 else "are"
        raise ValueError(f"{', '.join(given)} {verb} for {given_for}; {args.checkpoint} {instead}")


def run(args: argparse.Namespace) -> list[str]:
    """What generate.py prints: translations, one per input sentence, for a seq2seq checkpoint; samples, each under
    a header, otherwise."""
    check_options(args)
    translating = args.source is not None or args.input is not None
    if translating or read_checkpoint(args.checkpoint)["zoo"].get("task") == "seq2seq":
        return translate(args)
    return [f"----- sample {i} -----\n{text}" for i, text in enumerate(generate(args))]


def read_sources(args: argparse.Namespace) -> list[str]:
    if args.source is not None and args.input is not None:
        raise ValueError("give sentences with --source or a file with --input, not both")
    if args.source is not None:
        return list(args.source)
    if args.input is None:
        raise ValueError("a Transformer checkpoint translates: give sentences with --source or a file with --input")
    if args.input == "-":
        return decode_utf8(sys.stdin.buffer.read(), Path("<standard input>"), "--input").splitlines()
    path = Path(args.input)
    if not path.is_file():
        raise FileNotFoundError(f"input file not found: {path.resolve()}")
    return decode_utf8(path.read_bytes(), path, "--input").splitlines()


def translate(args: argparse.Namespace) -> list[str]:
    """Translate sentences with a seq2seq checkpoint: one output line per input line, in order (an empty line gives
    an empty one); a sentence longer than the model's max_len is refused, naming its line."""
    options = "translates (options: --beam-size, --length-penalty, --max-len-b, --batch-size)"
    _refuse_given(args, SAMPLING_DEFAULTS, "sampling from a GPT checkpoint", options)
    model, info = load_model_from_checkpoint(args.checkpoint, task="seq2seq")
    if info.get("tokenizer") is None:
        raise ValueError(f"{args.checkpoint} has no tokenizer stored; it cannot turn text into tokens")
    tokenizer = TranslationTokenizer.from_json(info["tokenizer"])
    sentences = read_sources(args)
    limit = model.config.max_len
    encoded = {}
    for line, text in enumerate(sentences, start=1):
        if not text.strip():
            continue
        unknown = tokenizer.unknown_source_characters(text.strip())
        if unknown:  # the GPT refuses them too: a translation of <unk> is a guess the user would not see
            raise ValueError(
                f"sentence {line} has characters {''.join(unknown)!r} that the model's source vocabulary does not "
                "have (they would be read as <unk>); remove or replace them"
            )
        ids = tokenizer.encode_source(text.strip())
        if len(ids) > limit:
            raise ValueError(
                f"sentence {line} has {len(ids)} tokens but the model's max_len is {limit}; split or shorten it"
            )
        encoded[line - 1] = ids
    device = check_device(args.device)
    model.to(device)
    out = [""] * len(sentences)
    order = sorted(encoded, key=lambda i: len(encoded[i]))  # similar lengths together: little padding
    for start in range(0, len(order), args.batch_size):
        rows = order[start : start + args.batch_size]
        src = pad_sequence([torch.tensor(encoded[i]) for i in rows], batch_first=True, padding_value=tokenizer.pad_id)
        mask = pad_sequence([torch.ones(len(encoded[i]), dtype=torch.long) for i in rows], batch_first=True)
        result = model.generate(
            src.to(device),
            mask.to(device),
            beam_size=args.beam_size,
            length_penalty=args.length_penalty,
            max_new_tokens=min(limit, src.shape[1] + args.max_len_b),
        )
        for r, i in enumerate(rows):
            out[i] = tokenizer.decode(result[r].tolist())
    return out


def generate(args: argparse.Namespace) -> list[str]:
    instead = "is sampled from (for greedy decoding: --temperature 0)"
    _refuse_given(args, TRANSLATION_DEFAULTS, "translating with a Transformer checkpoint", instead)
    model, info = load_model_from_checkpoint(args.checkpoint, task="causal_lm")
    if info.get("tokenizer") is None:
        raise ValueError(f"{args.checkpoint} has no tokenizer stored; it cannot turn text into tokens")
    tokenizer = tokenizer_from_json(info["tokenizer"])
    ids = tokenizer.encode(args.prompt)
    if not ids:
        raise ValueError("the prompt is empty after tokenization; give at least one character")
    block = model.config.block_size
    if len(ids) > block:
        raise ValueError(f"the prompt has {len(ids)} tokens but the model's context is {block}; shorten the prompt")
    device = check_device(args.device)
    model.to(device)
    generator = torch.Generator(device=device).manual_seed(args.seed)
    prompt = torch.tensor([ids], device=device).expand(args.num_samples, -1)
    out = model.generate(
        prompt,
        args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        eos_token_id=tokenizer.eos_id,
        generator=generator,
    )
    return [tokenizer.decode(row.tolist()) for row in out]
