"""Check the optimizer groups a run trained with, from its checkpoint: every tensor in a weight-decay group is a
matrix (2-D or more) and the matrices do decay, judged by the shapes of the optimizer's own state (Adam's moments
have the parameter's shape).

A sharded run must pass too: `trainer=fsdp` (FSDP2) keeps each parameter's logical shape, where FSDP1 with
flattened parameters would have shown every tensor as 1-D and taken weight decay off the matrices.

    python -m benchmarks.optimizer_groups <run>/checkpoints/last.ckpt
"""

from __future__ import annotations

import argparse
import sys

import torch


def group_shapes(checkpoint: dict) -> list[tuple[float, list[int]]]:
    """(weight_decay, [dim of each tensor's first moment]) per group of the first optimizer."""
    optimizer = checkpoint["optimizer_states"][0]
    state = optimizer["state"]
    groups = []
    for group in optimizer["param_groups"]:
        moments = [state[i].get("exp_avg") for i in group["params"] if i in state]
        groups.append((float(group.get("weight_decay", 0.0)), [m.dim() for m in moments if m is not None]))
    return groups


def problems(checkpoint: dict) -> list[str]:
    """What is wrong with the groups: a vector that decays, or (with decay configured) no matrix that does. A
    matrix without decay is allowed: models exempt some by name (ViT's class token and positions)."""
    groups = group_shapes(checkpoint)
    found = [
        f"group {i} decays (weight_decay={decay}) {dims.count(1)} tensor(s) of 1 dimension"
        for i, (decay, dims) in enumerate(groups)
        if decay > 0 and dims and min(dims) < 2
    ]
    if any(decay > 0 for decay, _ in groups) and not any(decay > 0 and dims for decay, dims in groups):
        found.append("weight decay is configured but no tensor decays (parameters seen as 1-D shards?)")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    args = parser.parse_args(argv)
    checkpoint = torch.load(args.checkpoint, map_location="cpu", weights_only=True)
    for index, (decay, dims) in enumerate(group_shapes(checkpoint)):
        print(f"group {index}: weight_decay={decay}, {len(dims)} tensors, dims {sorted(set(dims))}")
    found = problems(checkpoint)
    for line in found:
        print(f"error: {line}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
