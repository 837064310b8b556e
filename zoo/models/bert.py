"""BERT: a post-LN Transformer encoder with token, position and segment embeddings, a [CLS] pooler and a head.

The head is part of the config, so that a checkpoint rebuilds the exact module it came from:
- "pretraining": masked-LM head (dense, GELU, LayerNorm, decoder tied to the token embeddings with its own bias)
  plus the next-sentence head (2-way on the pooled output; label 0 = B follows A, 1 = B is random).
  This is Hugging Face's BertForPreTraining.
- "classification": dropout and a linear layer on the pooled output (BertForSequenceClassification).
- "none": the encoder and pooler only (BertModel).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from zoo.core import (
    ACTIVATIONS,
    AttentionSwitches,
    BlockStack,
    BlockSwitches,
    CausalSwitch,
    ComputeOptions,
    PositionConcat,
    PositionSwitches,
    SegmentEmbedding,
    TokenEmbedding,
    apply_norm,
    build_attention_mask,
    check_choice,
    init_transformer_weights,
    make_norm,
    make_position_embedding,
    merge_positions,
)

from .base import ZooModel, check_heads_divide, check_positive, check_probability

HEADS = ("pretraining", "classification", "none")


@dataclass
class BERTConfig(PositionSwitches, AttentionSwitches, BlockSwitches, CausalSwitch, ComputeOptions):
    """BERT's sizes, with Hugging Face's BertConfig names, which BERT users know; the core's switches and options
    (zoo.core.switches) are inherited with BERT's defaults. `norm` also covers the embedding norm (the MLM head's
    own LayerNorm stays). With `causal` the pooled vector comes from the last real token (the only one that has
    seen the whole input) instead of [CLS]."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    layer_norm_eps: float = 1e-12
    hidden_act: str = "gelu"
    initializer_range: float = 0.02
    pad_token_id: int = 0
    head: str = "pretraining"
    num_labels: int = 2  # classification head only
    classifier_dropout: float | None = None  # None: hidden_dropout_prob, as in Hugging Face

    def __post_init__(self) -> None:
        check_positive(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            intermediate_size=self.intermediate_size,
            max_position_embeddings=self.max_position_embeddings,
            type_vocab_size=self.type_vocab_size,
            num_labels=self.num_labels,
        )
        check_heads_divide(self, "hidden_size", "num_attention_heads", " (BERT uses hidden_size / 64 heads)")
        check_probability(
            hidden_dropout_prob=self.hidden_dropout_prob, attention_probs_dropout_prob=self.attention_probs_dropout_prob
        )
        if self.classifier_dropout is not None:
            check_probability(classifier_dropout=self.classifier_dropout)
        check_choice("hidden_act", self.hidden_act, ACTIVATIONS)
        check_choice("head", self.head, HEADS)
        self.check_core(d_model=self.hidden_size, n_heads=self.num_attention_heads)
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(f"pad_token_id={self.pad_token_id} is outside the vocabulary of {self.vocab_size} tokens")


def _size(layers: int, hidden: int) -> dict:
    # Turc et al. 2019 ("Well-Read Students Learn Better") and the original models: 64-dim heads, 4x feed-forward.
    return dict(
        num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=hidden // 64, intermediate_size=4 * hidden
    )


BERT_PRESETS = {
    "bert-base": _size(12, 768),
    "bert-large": _size(24, 1024),
    "bert-tiny": _size(2, 128),
    "bert-mini": _size(4, 256),
    "bert-small": _size(4, 512),
    "bert-medium": _size(8, 512),
}


@dataclass
class BERTOutput:
    """hidden: (B, T, H); pooled: (B, H). mlm_logits: (B, T, V), or (N, V) at the N positions of `mlm_positions`.
    nsp_logits: (B, 2). logits: (B, num_labels) of the classification head."""

    hidden: torch.Tensor
    pooled: torch.Tensor
    mlm_logits: torch.Tensor | None = None
    nsp_logits: torch.Tensor | None = None
    logits: torch.Tensor | None = None


class MLMHead(nn.Module):
    """dense -> activation -> LayerNorm -> the token-embedding matrix (tied) + an output bias."""

    def __init__(self, hidden: int, vocab_size: int, activation: str, eps: float) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.act = ACTIVATIONS[activation]()
        self.norm = nn.LayerNorm(hidden, eps=eps)
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, hidden: torch.Tensor, embedding: TokenEmbedding) -> torch.Tensor:
        return F.linear(self.norm(self.act(self.dense(hidden))), embedding.weight, self.bias)


class BERT(ZooModel):
    model_type = "bert"
    config_class = BERTConfig
    presets = BERT_PRESETS
    reads = "text"
    hf_native = True

    def __init__(self, config: BERTConfig) -> None:
        super().__init__(config)
        c = config
        # With added sinusoids the token vectors are scaled by sqrt(d_model), as in the 2017 paper (see GPT).
        self.tok_emb = TokenEmbedding(c.vocab_size, c.hidden_size, padding_idx=c.pad_token_id, scale=c.adds_sinusoids())
        self.pos_emb = make_position_embedding(
            c.positions, c.max_position_embeddings, c.hidden_size, base=c.sinusoid_base
        )
        self.pos_merge = PositionConcat(c.hidden_size) if c.position_merge == "concat" else None
        self.seg_emb = SegmentEmbedding(c.type_vocab_size, c.hidden_size)
        self.emb_norm = make_norm(c.norm, c.hidden_size, eps=c.layer_norm_eps)
        self.drop = nn.Dropout(c.hidden_dropout_prob) if c.hidden_dropout_prob else nn.Identity()
        self.blocks = BlockStack(
            c.num_hidden_layers,
            c.hidden_size,
            final_norm=False,  # post-LN: every block already ends in a norm
            n_heads=c.num_attention_heads,
            d_ff=c.intermediate_size,
            dropout=c.hidden_dropout_prob,
            attn_dropout=c.attention_probs_dropout_prob,
            activation=c.hidden_act,
            norm_first=False,
            norm_eps=c.layer_norm_eps,
            **c.stack_options(),
        )
        self.pooler = nn.Linear(c.hidden_size, c.hidden_size)
        self.mlm = self.nsp = self.classifier = None
        if c.head == "pretraining":
            self.mlm = MLMHead(c.hidden_size, c.vocab_size, c.hidden_act, c.layer_norm_eps)
            self.nsp = nn.Linear(c.hidden_size, 2)
        elif c.head == "classification":
            p = c.hidden_dropout_prob if c.classifier_dropout is None else c.classifier_dropout
            self.classifier_drop = nn.Dropout(p) if p else nn.Identity()
            self.classifier = nn.Linear(c.hidden_size, c.num_labels)
        self.apply(partial(init_transformer_weights, std=c.initializer_range))

    def positions(self) -> int:
        return self.config.max_position_embeddings

    def num_classes(self) -> int | None:
        return self.config.num_labels if self.config.head == "classification" else None

    def pipeline_tag(self) -> str:
        return {"classification": "text-classification", "pretraining": "fill-mask"}.get(
            self.config.head, "feature-extraction"
        )

    def encode(
        self,
        input_ids: torch.Tensor,
        *,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, T) ids -> hidden states (B, T, H) and the pooled vector tanh(W h + b) (B, H) of [CLS] (position 0),
        or with `causal` of the last real token.

        attention_mask: (B, T), 1 for real tokens and 0 for padding (Hugging Face's convention)."""
        c = self.config
        _, t = input_ids.shape
        if position_ids is not None and self.pos_emb is None:
            raise ValueError(f"position_ids are for learned or sinusoidal positions, not positions='{c.positions}'")
        if position_ids is None and self.pos_emb is not None:
            position_ids = torch.arange(t, device=input_ids.device)[None]
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        keep = None if attention_mask is None else attention_mask.to(torch.bool)  # real tokens, for masked BN
        pos = None if self.pos_emb is None else self.pos_emb(position_ids)
        x = merge_positions(self.tok_emb(input_ids), pos, self.pos_merge) + self.seg_emb(token_type_ids)
        x = self.drop(apply_norm(self.emb_norm, x, keep, masked=c.norm == "batchnorm_masked"))
        padded = keep is not None and not bool(keep.all())
        mask, is_causal = None, c.causal
        if padded and c.causal and c.attn_window is not None:
            mask = keep[:, None, None, :]  # a key padding mask only: the window adds causality itself
        elif padded:
            mask, is_causal = build_attention_mask(attention_mask, t, t, causal=c.causal), False
        hidden = self.blocks(x, mask=mask, is_causal=is_causal, token_mask=keep)
        return hidden, torch.tanh(self.pooler(self._pooled_token(hidden, keep)))

    def _pooled_token(self, hidden: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
        """[CLS]'s hidden state; under causal attention, the last real token's (any padding layout)."""
        if not self.config.causal:
            return hidden[:, 0]
        if keep is None:
            return hidden[:, -1]
        positions = torch.arange(hidden.shape[1], device=hidden.device)
        last = torch.where(keep, positions, -1).amax(dim=-1).clamp(min=0)
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]

    def forward(
        self,
        input_ids: torch.Tensor,
        *,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        mlm_positions: torch.Tensor | None = None,
    ) -> BERTOutput:
        """mlm_positions: (B, T) bool, the positions whose MLM logits are wanted (the masked ones in pretraining).
        Projecting only those onto the vocabulary skips ~85% of the largest matmul; None projects every position."""
        hidden, pooled = self.encode(
            input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask, position_ids=position_ids
        )
        out = BERTOutput(hidden=hidden, pooled=pooled)
        if self.mlm is not None:
            selected = hidden if mlm_positions is None else hidden[mlm_positions.to(torch.bool)]
            out.mlm_logits = self.mlm(selected, self.tok_emb)
            out.nsp_logits = self.nsp(pooled)
        if self.classifier is not None:
            out.logits = self.classifier(self.classifier_drop(pooled))
        return out

    def load_encoder_from(self, other: BERT) -> list[str]:
        """Copy every weight of `other` whose name and shape match this model (encoder, pooler and any shared
        head), e.g. a pretrained encoder into a fresh classifier. Returns the names left at their initialization;
        raises if the encoders differ."""
        own = self.state_dict()
        source = other.state_dict()
        for name, tensor in own.items():
            encoder = not name.startswith(("mlm.", "nsp.", "classifier."))
            if encoder and (name not in source or source[name].shape != tensor.shape):
                found = tuple(source[name].shape) if name in source else "nothing"
                raise ValueError(
                    f"the pretrained encoder does not fit: '{name}' is {tuple(tensor.shape)} here but {found} there; "
                    "build the model with the pretrained model's sizes and vocabulary"
                )
        usable = {k: v for k, v in source.items() if k in own and own[k].shape == v.shape}
        self.load_state_dict(usable, strict=False)
        return sorted(set(own) - set(usable))

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token (forward + backward), the PaLM-paper estimate: 6 per weight that a token
        passes through plus attention. The vocabulary projection is left out: it runs only at masked positions."""
        c = self.config
        per_layer = 4 * c.hidden_size**2 + 2 * c.hidden_size * c.intermediate_size
        return 6 * c.num_hidden_layers * per_layer + 12 * c.num_hidden_layers * c.hidden_size * seq_len
