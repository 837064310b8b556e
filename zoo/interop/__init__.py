"""Import and export of Hugging Face checkpoint directories, read straight from disk (no hub, no transformers)."""

from .hf import load_hf, save_hf

__all__ = ["load_hf", "save_hf"]
