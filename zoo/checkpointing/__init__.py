"""Checkpoint files: reading them with `weights_only=True` and checking them before a run resumes (`reading`),
writing them atomically so a kill never leaves a half-written last.ckpt (`atomic_io`), and the checksum of the
weights recorded at save and verified at every load (`weights_checksum`). What a checkpoint is written from (the
task's hooks, the callbacks) lives with the tasks and in zoo.callbacks."""

from .atomic_io import AtomicCheckpointIO, remove_orphans, temp_path
from .reading import (
    check_checkpoint_file,
    check_resume,
    check_same_model,
    load_model_from_checkpoint,
    read_checkpoint,
    torch_load_weights,
)
from .weights_checksum import record_checksum, verify_checkpoint

__all__ = [
    "AtomicCheckpointIO",
    "check_checkpoint_file",
    "check_resume",
    "check_same_model",
    "load_model_from_checkpoint",
    "read_checkpoint",
    "record_checksum",
    "remove_orphans",
    "temp_path",
    "torch_load_weights",
    "verify_checkpoint",
]
