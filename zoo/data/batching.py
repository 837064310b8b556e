"""The global batch in the config, divided among devices and gradient-accumulation steps."""

from __future__ import annotations


def per_device_batch_size(global_batch: int, trainer=None, *, option: str = "batch_size", unit: str = "") -> int:
    """global_batch / (world_size x accumulate_grad_batches); a batch that does not divide is an error, never
    rounded, so the effective batch is always the configured one. `option` names the config key in the error and
    `unit` what the batch counts when it is not rows (", in tokens")."""
    world, accumulate = 1, 1
    if trainer is not None:
        world, accumulate = trainer.world_size, trainer.accumulate_grad_batches
    share = world * accumulate
    if global_batch % share:
        raise ValueError(
            f"data.{option}={global_batch} (the global batch{unit}) is not divisible by "
            f"world_size {world} x accumulate_grad_batches {accumulate}; pick a multiple of {share}"
        )
    return global_batch // share
