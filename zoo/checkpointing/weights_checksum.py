"""The weights checksum of a Lightning checkpoint: written into its "zoo" section at save, verified at every load.

torch.load does not check the bytes it reads: a checkpoint with a block zeroed inside a weight (a bad disk, a copy
cut short) would load silently. The checksum covers the state dict's "net." entries (the network's weights); a
mismatch is a one-line error naming the file. Checkpoints that record no checksum still load.
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
    """Raise ValueError naming `source` on a mismatch; True when verified, False when no checksum is recorded."""
    recorded = (checkpoint.get("zoo") or {}).get(KEY)
    return verify_weights(_network_weights(checkpoint), recorded, source)
