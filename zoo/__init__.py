"""transformer-zoo: one shared attention/block core, four classic Transformer models."""

__version__ = "0.1.0"
