"""The four models, each a thin specialization of `zoo.core`; plain nn.Modules, no Lightning or Hydra."""

from .base import ZooModel
from .gpt import GPT, GPTConfig

# model_type -> class, for checkpoints and interop that must rebuild a model from its stored config.
MODEL_TYPES: dict[str, type[ZooModel]] = {GPT.model_type: GPT}

__all__ = ["GPT", "GPTConfig", "MODEL_TYPES", "ZooModel"]
