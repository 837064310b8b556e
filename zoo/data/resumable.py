"""Shuffling samplers whose order depends only on (seed, epoch), so that a resumed run continues exactly.

torch's RandomSampler draws its order from the global RNG and Lightning does not fast-forward it on resume; here
the position is derived from the trainer's global step, which the checkpoint restores (`resumable_sampler`). They
are DistributedSamplers, so Lightning does not wrap them; a subclass changes only `order`.
"""

from __future__ import annotations

import math

import torch
from torch.utils.data import DataLoader, DistributedSampler


class ResumableShuffle(DistributedSampler):
    def __init__(self, dataset, *, seed: int, rank: int = 0, world_size: int = 1) -> None:
        if len(dataset) < world_size:
            raise ValueError(f"{len(dataset)} samples cannot be shared by {world_size} processes")
        super().__init__(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=True)
        self.start = 0

    def order(self, generator: torch.Generator) -> list[int]:
        """All indices of one epoch, in the order the ranks share them (rank r takes positions r, r+W, ...)."""
        return torch.randperm(len(self.dataset), generator=generator).tolist()

    def set_step(self, steps: int, *, batch_size: int, accumulate: int = 1, limit_batches: int | float = 1.0):
        """Continue after `steps` optimizer steps of `accumulate` batches of `batch_size` samples each. An epoch is
        the whole batches of `len(self)` samples, cut to `limit_batches` as Lightning's limit_train_batches does."""
        check_fills_a_batch(self, batch_size, accumulate=accumulate)
        whole = len(self) // batch_size
        batches = min(whole, limit_batches) if isinstance(limit_batches, int) else int(whole * limit_batches)
        if batches <= 0:
            raise ValueError(
                f"trainer.limit_train_batches={limit_batches} keeps none of the {whole} training batches per epoch; "
                "raise it (or set train=false to skip training)"
            )
        steps_per_epoch = math.ceil(batches / accumulate)
        self.epoch, step_in_epoch = divmod(steps, steps_per_epoch)
        self.start = step_in_epoch * accumulate * batch_size

    def set_epoch(self, epoch: int) -> None:
        """Ignored: Lightning calls this with its epoch counter, which counts an epoch cut short by max_steps as
        finished, so a resumed run would jump to a new order. The epoch here follows the samples consumed."""

    def __iter__(self):
        # The epoch advances when an iteration starts: with limit_train_batches the loader is left unfinished.
        epoch, start = self.epoch, self.start
        self.epoch, self.start = epoch + 1, 0  # the skip applies to the first pass after a resume only
        order = self.order(torch.Generator().manual_seed(self.seed * 1_000_003 + epoch))
        mine = order[self.rank : self.total_size : self.num_replicas]
        return iter(mine[start:])


def check_fills_a_batch(sampler: ResumableShuffle, batch_size: int, *, accumulate: int = 1) -> None:
    """Training loaders keep whole batches only (drop_last): a split smaller than one batch would train nothing
    and still "succeed", so it is refused, naming the split's size and the configured (global) batch."""
    if len(sampler) >= batch_size:
        return
    world = sampler.num_replicas
    share = ""
    if world * accumulate > 1:
        share = f" ({batch_size} per process: {world} processes x {accumulate} accumulation steps)"
    raise ValueError(
        f"the training split has {len(sampler.dataset)} rows but data.batch_size={batch_size * world * accumulate}"
        f"{share} with drop_last leaves no batch; lower data.batch_size or give more training data"
    )


def resumable_sampler(dataset, *, seed: int, trainer, batch_size: int, kind=ResumableShuffle, **kwargs):
    """A sampler of `kind` for this trainer's rank, positioned after the optimizer steps it has already taken.
    `batch_size`: dataset items per loader batch (1 when the items are batches themselves)."""
    rank, world, step, accumulate, limit = 0, 1, 0, 1, 1.0
    if trainer is not None:
        rank, world = trainer.global_rank, trainer.world_size
        step, accumulate, limit = trainer.global_step, trainer.accumulate_grad_batches, trainer.limit_train_batches
    sampler = kind(dataset, seed=seed, rank=rank, world_size=world, **kwargs)
    sampler.set_step(step, batch_size=batch_size, accumulate=accumulate, limit_batches=limit)
    return sampler


def loader_generator(seed: int) -> torch.Generator:
    """For DataLoader(generator=...): an iterator draws a seed from it; from the global RNG it would shift the
    dropout masks of a resumed run."""
    return torch.Generator().manual_seed(seed)


def seeded_loader(
    dataset, *, batch_size: int | None, seed: int, num_workers: int, sampler=None, **kwargs
) -> DataLoader:
    """A loader that draws nothing from the global RNG when iterated. With a (training) sampler: in its order,
    whole batches only; without one: in dataset order, every item (evaluation)."""
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        drop_last=sampler is not None and batch_size is not None,
        num_workers=num_workers,
        persistent_workers=num_workers > 0,
        generator=loader_generator(seed),
        **kwargs,
    )
