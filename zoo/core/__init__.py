"""The shared core: every model in `zoo.models` is built from these pieces and nothing else.

This package imports nothing else of zoo.
"""

from .attention import ATTENTION_IMPLS, MultiHeadAttention
from .block import Block, BlockStack
from .decoding import beam_search, decode_tokens, length_penalty_factor
from .embeddings import (
    LearnedPositionEmbedding,
    PatchEmbedding,
    SegmentEmbedding,
    SinusoidalPositionEmbedding,
    TokenEmbedding,
)
from .feedforward import ACTIVATIONS, FeedForward
from .init import init_transformer_weights, scale_residual_projections
from .kv_cache import KVCache, LayerCache
from .chunked_loss import linear_cross_entropy
from .masks import build_attention_mask
from .norms import NORMS, make_norm
from .sampling import filter_logits, sample_next_token

__all__ = [
    "ACTIVATIONS",
    "ATTENTION_IMPLS",
    "NORMS",
    "Block",
    "BlockStack",
    "FeedForward",
    "KVCache",
    "LayerCache",
    "LearnedPositionEmbedding",
    "MultiHeadAttention",
    "PatchEmbedding",
    "SegmentEmbedding",
    "SinusoidalPositionEmbedding",
    "TokenEmbedding",
    "beam_search",
    "build_attention_mask",
    "decode_tokens",
    "filter_logits",
    "init_transformer_weights",
    "length_penalty_factor",
    "linear_cross_entropy",
    "make_norm",
    "sample_next_token",
    "scale_residual_projections",
]
