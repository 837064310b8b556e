"""Import and export of Hugging Face checkpoint directories, read straight from disk (no hub, no transformers)."""

from .export import export_hf
from .hf import load_hf, save_hf
from .vit import load_vit

__all__ = ["export_hf", "load_hf", "load_vit", "save_hf"]
