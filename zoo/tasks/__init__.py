"""LightningModules, one per task, on one base (ZooTask). They own losses, metrics and optimizers; models stay
plain nn.Modules."""

from .base import ZooTask
from .causal_lm import CausalLMTask
from .checkpoint import load_model_from_checkpoint, read_checkpoint
from .classification import SequenceClassificationTask
from .image_classification import ImageClassificationTask
from .pretraining import BertPretrainingTask
from .seq2seq import Seq2SeqTask
from .throughput_monitor import ZooThroughputMonitor

__all__ = [
    "BertPretrainingTask",
    "CausalLMTask",
    "ImageClassificationTask",
    "Seq2SeqTask",
    "SequenceClassificationTask",
    "ZooTask",
    "ZooThroughputMonitor",
    "load_model_from_checkpoint",
    "read_checkpoint",
]
