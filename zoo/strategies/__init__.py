"""Lightning strategies zoo adds to the ones it ships: fully sharded data parallel training (FSDP2, torch's
`fully_shard` per core Block) for `trainer=fsdp` (`fsdp`), with the check that refuses an optimizer it cannot
shard."""

from .fsdp import FSDP2Strategy, check_optimizer_for_sharding, is_sharded, shard_per_block

__all__ = ["FSDP2Strategy", "check_optimizer_for_sharding", "is_sharded", "shard_per_block"]
