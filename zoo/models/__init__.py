"""The four models, each a thin specialization of `zoo.core`, a convolutional baseline (CNN, from torchvision's
ResNet blocks) and the lab's plain/residual MLP (DeepMLP, He et al. 2016's Figure 1 at MNIST scale); plain
nn.Modules, no Lightning or Hydra."""

from .base import ZooModel
from .bert import BERT, BERTConfig
from .cnn import CNN, CNNConfig
from .deep_mlp import DeepMLP, DeepMLPConfig
from .gpt import GPT, GPTConfig
from .transformer import Transformer, TransformerConfig
from .vit import ViT, ViTConfig

# model_type -> class, for checkpoints and interop that must rebuild a model from its stored config; each class
# registers itself where it is defined (ZooModel.__init_subclass__), the imports above make them all known.
MODEL_TYPES = ZooModel.registry

__all__ = [
    "BERT",
    "BERTConfig",
    "CNN",
    "CNNConfig",
    "DeepMLP",
    "DeepMLPConfig",
    "GPT",
    "GPTConfig",
    "MODEL_TYPES",
    "Transformer",
    "TransformerConfig",
    "ViT",
    "ViTConfig",
    "ZooModel",
]
