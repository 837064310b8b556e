"""Data: dataset files, tokenizers and DataModules. Imports neither zoo.models nor zoo.tasks."""

from .lm import LanguageModelDataModule
from .sources import DATASETS, DatasetFile, resolve_dataset
from .tokenizer import BPETokenizer, CharTokenizer, tokenizer_from_json

__all__ = [
    "BPETokenizer",
    "CharTokenizer",
    "DATASETS",
    "DatasetFile",
    "LanguageModelDataModule",
    "resolve_dataset",
    "tokenizer_from_json",
]
