"""LightningModules, one per task. They own losses, metrics and optimizers; models stay plain nn.Modules."""

from .causal_lm import CausalLMTask
from .pretraining import BertPretrainingTask
from .classification import SequenceClassificationTask
from .checkpoint import load_model_from_checkpoint, read_checkpoint
from .seq2seq import Seq2SeqTask

__all__ = ["BertPretrainingTask", "SequenceClassificationTask", "CausalLMTask", "load_model_from_checkpoint", "read_checkpoint"]
__all__ += ["Seq2SeqTask"]
from .image_classification import ImageClassificationTask  # noqa: E402
__all__ += ["ImageClassificationTask"]
