"""A shuffling sampler whose order depends only on (seed, epoch), so that a resumed run continues exactly.

torch's RandomSampler draws its order from the global RNG when the loader is iterated, and Lightning does not
fast-forward it on resume: a run resumed mid-epoch would replay the start of a new order. Here the position is
derived from the trainer's global step instead, which the checkpoint restores.

It is a DistributedSampler (sharded by rank), so Lightning uses it as it is instead of wrapping it in another
distributed sampler; it counts its own epochs (see `set_epoch`).
"""

from __future__ import annotations

import torch
from torch.utils.data import Dataset, DistributedSampler


class ResumableShuffle(DistributedSampler):
    def __init__(self, dataset: Dataset, *, seed: int, rank: int = 0, world_size: int = 1) -> None:
        if len(dataset) < world_size:
            raise ValueError(f"{len(dataset)} samples cannot be shared by {world_size} processes")
        super().__init__(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=True)
        self.start = 0

    def set_position(self, samples_consumed: int) -> None:
        """Continue after `samples_consumed` samples of this rank, counted over all epochs."""
        self.epoch, self.start = divmod(samples_consumed, len(self))

    def set_epoch(self, epoch: int) -> None:
        """Ignored: Lightning calls this with its epoch counter, which counts an epoch cut short by max_steps as
        finished, so a resumed run would jump to a new order. The epoch here follows the samples consumed."""

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        order = torch.randperm(len(self.dataset), generator=generator)
        mine = order[self.rank : self.total_size : self.num_replicas]
        start, self.start = self.start, 0  # the skip applies to the first pass after a resume only
        yield from mine[start:].tolist()
        self.epoch += 1
