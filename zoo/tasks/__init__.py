"""LightningModules, one per task. They own losses, metrics and optimizers; models stay plain nn.Modules."""

from .causal_lm import CausalLMTask
from .checkpoint import load_model_from_checkpoint, read_checkpoint

__all__ = ["CausalLMTask", "load_model_from_checkpoint", "read_checkpoint"]
