"""The weights checksum of a Lightning checkpoint: written into its "zoo" section at save, verified at every load.

torch.load does not check the bytes of the tensors it reads: a checkpoint with a block zeroed in the middle of a
weight (a bad disk, a copy cut short and padded) loads silently and trains, evaluates or samples from garbage.
The checksum (zoo.models.hub.weights_checksum) covers the network's weights, the state dict's "net." entries (a
task's only module holding weights; entries beside them, like the "_forward_fn." copies of old checkpoints, are
dropped at load). A mismatch is a one-line error naming the file. Checkpoints written before checksums were
recorded still load.
"""

from __future__ import annotations

from pathlib import Path

import torch

from zoo.models.hub import verify_weights, weights_checksum

KEY = "weights_checksum"  # in checkpoint["zoo"]
PREFIX = "net."


def _network_weights(checkpoint: dict) -> dict:
    return {k: v for k, v in checkpoint.get("state_dict", {}).items() if k.startswith(PREFIX)}


def record_checksum(checkpoint: dict) -> None:
    """Store the checksum of the network's weights in the "zoo" section (call once the state dict is final)."""
    weights = _network_weights(checkpoint)
    if any(type(v) not in (torch.Tensor, torch.nn.Parameter) for v in weights.values()):
        return  # a sharded state (DTensor, FSDP state_dict_type=sharded) has no one set of bytes on any rank
    checkpoint.setdefault("zoo", {})[KEY] = weights_checksum(weights)


def verify_checkpoint(checkpoint: dict, source: str | Path) -> bool:
    """Raise ValueError "<source>: weights do not match their checksum ..." on a mismatch; True when verified,
    False when the checkpoint records no checksum (written by an older zoo)."""
    recorded = (checkpoint.get("zoo") or {}).get(KEY)
    return verify_weights(_network_weights(checkpoint), recorded, source)
