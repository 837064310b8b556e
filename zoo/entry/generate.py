"""Sample text from a causal-LM checkpoint."""

from __future__ import annotations

import argparse

import torch

from zoo.data import tokenizer_from_json
from zoo.tasks import load_model_from_checkpoint


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Sample from a GPT checkpoint written by train.py.")
    p.add_argument("checkpoint", help="a .ckpt file, e.g. logs/.../checkpoints/last.ckpt")
    p.add_argument("--prompt", default="\n", help="text to continue (default: a newline)")
    p.add_argument("--max-new-tokens", type=int, default=200)
    p.add_argument("--num-samples", type=int, default=1)
    p.add_argument("--temperature", type=float, default=0.8, help="0 for greedy decoding")
    p.add_argument("--top-k", type=int, default=200)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--device", default="cpu")
    return p.parse_args(argv)


def generate(args: argparse.Namespace) -> list[str]:
    model, info = load_model_from_checkpoint(args.checkpoint, task="causal_lm")
    if info.get("tokenizer") is None:
        raise ValueError(f"{args.checkpoint} has no tokenizer stored; it cannot turn text into tokens")
    if args.num_samples <= 0:
        raise ValueError(f"--num-samples must be positive, got {args.num_samples}")
    tokenizer = tokenizer_from_json(info["tokenizer"])
    ids = tokenizer.encode(args.prompt)
    if not ids:
        raise ValueError("the prompt is empty after tokenization; give at least one character")
    block = model.config.block_size
    if len(ids) > block:
        raise ValueError(f"the prompt has {len(ids)} tokens but the model's context is {block}; shorten the prompt")
    device = torch.device(args.device)
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
