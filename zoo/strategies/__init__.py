"""Lightning strategies zoo adds: FSDP2 (torch's `fully_shard` per core Block) for `trainer=fsdp` (`fsdp`)."""
