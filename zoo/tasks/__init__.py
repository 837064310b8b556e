"""LightningModules, one per task, on one base (ZooTask). They own losses, metrics and optimizers; models stay
plain nn.Modules. What they use but do not define lives beside them: optimizers and schedules in zoo.optim,
checkpoint files in zoo.checkpointing, callbacks in zoo.callbacks, the sharded strategy in zoo.strategies."""

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
