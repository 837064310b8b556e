"""Data: dataset files, tokenizers and DataModules. Imports neither zoo.models nor zoo.tasks."""

from .base import ZooDataModule
from .bert_pretraining import BertPretrainingDataModule
from .char_tagging import CharTaggingDataModule
from .glue import GlueDataModule
from .images import ImageClassificationDataModule
from .litdata_stream import LitDataDataModule  # imports LitData only when used (the `litdata` extra)
from .lm import LanguageModelDataModule
from .recall import RecallDataModule
from .sources import DATASETS, DatasetFile, resolve_dataset
from .token_shards import TokenShardsDataModule
from .tokenizer import BPETokenizer, CharTokenizer, tokenizer_from_json
from .translation import TranslationDataModule
from .translation_tokenizer import TranslationTokenizer
from .wordpiece import WordPieceTokenizer

__all__ = [
    "BertPretrainingDataModule",
    "CharTaggingDataModule",
    "GlueDataModule",
    "WordPieceTokenizer",
    "BPETokenizer",
    "CharTokenizer",
    "DATASETS",
    "DatasetFile",
    "ImageClassificationDataModule",
    "LanguageModelDataModule",
    "LitDataDataModule",
    "RecallDataModule",
    "resolve_dataset",
    "tokenizer_from_json",
    "TokenShardsDataModule",
    "TranslationDataModule",
    "TranslationTokenizer",
    "ZooDataModule",
]
