"""The four models, each a thin specialization of `zoo.core`; plain nn.Modules, no Lightning or Hydra."""

from .base import ZooModel
from .bert import BERT, BERTConfig
from .gpt import GPT, GPTConfig
from .transformer import Transformer, TransformerConfig
from .vit import ViT, ViTConfig

# model_type -> class, for checkpoints and interop that must rebuild a model from its stored config.
MODEL_TYPES: dict[str, type[ZooModel]] = {BERT.model_type: BERT, GPT.model_type: GPT, ViT.model_type: ViT}
MODEL_TYPES[Transformer.model_type] = Transformer

__all__ = [
    "BERT",
    "BERTConfig",
    "GPT",
    "GPTConfig",
    "MODEL_TYPES",
    "Transformer",
    "TransformerConfig",
    "ViT",
    "ViTConfig",
    "ZooModel",
]
