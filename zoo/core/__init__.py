"""The shared core: every model in `zoo.models` is built from these pieces and nothing else.

This package imports nothing else of zoo.
"""

from .attention import (
    ATTENTION_IMPLS,
    ATTN_SCALES,
    ATTN_SCORES,
    QK_PROJS,
    MultiHeadAttention,
    check_attention_options,
)
from .block import Block, BlockStack
from .bn_fold import fold_batchnorms
from .chunked_loss import linear_cross_entropy
from .decoding import beam_search, decode_tokens, length_penalty_factor
from .embeddings import (
    LearnedPositionEmbedding,
    PatchEmbedding,
    SegmentEmbedding,
    SinusoidalPositionEmbedding,
    TokenEmbedding,
    sinusoid_table,
)
from .feedforward import ACTIVATIONS, FeedForward
from .init import init_transformer_weights, scale_residual_projections
from .kv_cache import KVCache, LayerCache
from .masks import build_attention_mask
from .norms import (
    FF_INNER_NORMS,
    NORMS,
    MaskedTokenBatchNorm,
    TokenBatchNorm,
    apply_norm,
    check_norm_options,
    make_norm,
)
from .positions import (
    ATTENTION_POSITIONS,
    INPUT_POSITIONS,
    POSITION_MERGES,
    POSITIONS,
    PositionConcat,
    RotaryEmbedding,
    alibi_bias,
    alibi_slopes,
    check_positions,
    make_position_embedding,
    merge_positions,
)
from .sampling import filter_logits, sample_next_token
from .switches import (
    AttentionSwitches,
    BlockSwitches,
    CausalSwitch,
    ComputeOptions,
    CoreOptions,
    PositionSwitches,
    Switches,
    check_choice,
    check_flags,
    suggestion,
    switch_names,
)
from .window import windowed_attention

__all__ = [
    "ACTIVATIONS",
    "ATTENTION_IMPLS",
    "ATTENTION_POSITIONS",
    "ATTN_SCALES",
    "ATTN_SCORES",
    "INPUT_POSITIONS",
    "FF_INNER_NORMS",
    "NORMS",
    "POSITIONS",
    "POSITION_MERGES",
    "QK_PROJS",
    "PositionConcat",
    "RotaryEmbedding",
    "alibi_bias",
    "alibi_slopes",
    "apply_norm",
    "check_norm_options",
    "check_attention_options",
    "check_positions",
    "make_position_embedding",
    "merge_positions",
    "sinusoid_table",
    "windowed_attention",
    "AttentionSwitches",
    "Block",
    "BlockStack",
    "BlockSwitches",
    "CausalSwitch",
    "ComputeOptions",
    "CoreOptions",
    "PositionSwitches",
    "Switches",
    "check_choice",
    "check_flags",
    "suggestion",
    "switch_names",
    "FeedForward",
    "KVCache",
    "LayerCache",
    "LearnedPositionEmbedding",
    "MaskedTokenBatchNorm",
    "MultiHeadAttention",
    "PatchEmbedding",
    "SegmentEmbedding",
    "SinusoidalPositionEmbedding",
    "TokenBatchNorm",
    "TokenEmbedding",
    "beam_search",
    "build_attention_mask",
    "decode_tokens",
    "filter_logits",
    "fold_batchnorms",
    "init_transformer_weights",
    "length_penalty_factor",
    "linear_cross_entropy",
    "make_norm",
    "sample_next_token",
    "scale_residual_projections",
]
