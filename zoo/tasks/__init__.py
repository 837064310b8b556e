"""LightningModules, one per task, on one base (ZooTask): they own losses, metrics and optimizers."""

from .base import ZooTask
from .causal_lm import CausalLMTask
from .classification import SequenceClassificationTask
from .image_classification import ImageClassificationTask
from .pretraining import BertPretrainingTask
from .seq2seq import Seq2SeqTask
from .token_tagging import TokenTaggingTask

__all__ = [
    "BertPretrainingTask",
    "CausalLMTask",
    "ImageClassificationTask",
    "Seq2SeqTask",
    "SequenceClassificationTask",
    "TokenTaggingTask",
    "ZooTask",
]
