"""GPT-2: a decoder-only, pre-LN Transformer with learned positions and a tied output matrix."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from zoo.core import (
    ACTIVATIONS,
    AttentionSwitches,
    BlockStack,
    BlockSwitches,
    ComputeOptions,
    KVCache,
    PositionConcat,
    PositionSwitches,
    TokenEmbedding,
    build_attention_mask,
    check_choice,
    decode_tokens,
    init_transformer_weights,
    linear_cross_entropy,
    make_position_embedding,
    merge_positions,
    scale_residual_projections,
)

from .base import ZooModel, check_heads_divide, check_positive, check_probability


@dataclass
class GPTConfig(PositionSwitches, AttentionSwitches, BlockSwitches, ComputeOptions):
    """GPT-2's sizes; the core's switches and options (zoo.core.switches) are inherited with GPT-2's defaults.
    Only positions="learned" is bound to block_size."""

    vocab_size: int = 50257
    block_size: int = 1024  # maximum context (number of learned positions)
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    # The FFN's hidden width; None: 4 * n_embd (GPT-2's). Named as in GPT-2's own config. A lab question that takes
    # parameters out of attention can give them back here without touching the attention it tests (lab/qk_proj).
    n_inner: int | None = None
    dropout: float = 0.0
    bias: bool = True
    layer_norm_eps: float = 1e-5
    activation: str = "gelu_tanh"
    tie_weights: bool = True

    def __post_init__(self) -> None:
        check_positive(
            vocab_size=self.vocab_size,
            block_size=self.block_size,
            n_layer=self.n_layer,
            n_head=self.n_head,
            n_embd=self.n_embd,
        )
        if self.n_inner is not None:
            check_positive(n_inner=self.n_inner)
        check_heads_divide(self, "n_embd", "n_head")
        check_probability(dropout=self.dropout)
        check_choice("activation", self.activation, ACTIVATIONS)
        self.check_core(d_model=self.n_embd, n_heads=self.n_head)

    def ffn_width(self) -> int:
        return 4 * self.n_embd if self.n_inner is None else self.n_inner


_GPT2 = dict(vocab_size=50257, block_size=1024, activation="gelu_tanh")

GPT_PRESETS = {
    "gpt2": dict(_GPT2, n_layer=12, n_head=12, n_embd=768),
    "gpt2-medium": dict(_GPT2, n_layer=24, n_head=16, n_embd=1024),
    "gpt2-large": dict(_GPT2, n_layer=36, n_head=20, n_embd=1280),
    "gpt2-xl": dict(_GPT2, n_layer=48, n_head=25, n_embd=1600),
    # Small sizes that train on a laptop CPU (vocab_size comes from the tokenizer). Like nanoGPT's own models
    # they use the exact GELU, which is also ~5% faster per training step on CPU than the tanh form.
    "gpt-nano": dict(block_size=64, n_layer=2, n_head=2, n_embd=64, activation="gelu"),
    "gpt-mini": dict(block_size=64, n_layer=4, n_head=4, n_embd=128, activation="gelu"),
    "gpt-small": dict(block_size=256, n_layer=6, n_head=6, n_embd=384, dropout=0.2, activation="gelu"),
}


class GPT(ZooModel):
    model_type = "gpt"
    forward_methods = ("loss",)
    config_class = GPTConfig
    presets = GPT_PRESETS
    reads = "text"
    hf_native = True

    def __init__(self, config: GPTConfig) -> None:
        super().__init__(config)
        c = config
        # Added sinusoids have unit amplitude, while GPT's token vectors start at std 0.02: the positions then drown
        # the tokens and the model learns little more than character frequencies (val loss 3.36 vs 2.36 for learned
        # positions after 400 steps of gpt-mini on tiny shakespeare). The 2017 paper scales the embeddings by
        # sqrt(d_model) for exactly this sum, so the sinusoidal switch does too (2.31).
        self.tok_emb = TokenEmbedding(c.vocab_size, c.n_embd, scale=c.adds_sinusoids())
        self.pos_emb = make_position_embedding(c.positions, c.block_size, c.n_embd, base=c.sinusoid_base)
        self.pos_merge = PositionConcat(c.n_embd) if c.position_merge == "concat" else None
        self.drop = nn.Dropout(c.dropout) if c.dropout else nn.Identity()
        self.blocks = BlockStack(
            c.n_layer,
            c.n_embd,
            final_norm=True,
            n_heads=c.n_head,
            d_ff=c.ffn_width(),
            dropout=c.dropout,
            attn_dropout=c.dropout,
            activation=c.activation,
            norm_first=True,
            norm_eps=c.layer_norm_eps,
            bias=c.bias,
            **c.stack_options(),
        )
        self.lm_head = None if c.tie_weights else nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.apply(partial(init_transformer_weights, std=0.02))
        scale_residual_projections(self, c.n_layer)

    def positions(self) -> int:
        return self.config.block_size

    def pipeline_tag(self) -> str:
        return "text-generation"

    def outside_native(self) -> dict:
        """GPT2LMHeadModel has biases."""
        return super().outside_native() | ({} if self.config.bias else {"bias": False})

    def forward(
        self,
        idx: torch.Tensor,
        *,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        """idx: (B, T) token ids -> logits (B, T, vocab).

        attention_mask: (B, past + T), 1 for real tokens and 0 for (left) padding; with a cache it covers the
        cached prefix too. Positions are then counted over real tokens only, as Hugging Face does (rope and
        alibi depend on distances only, which left padding leaves unchanged; they take no position_ids).
        The training loss is `loss` (the same network, without materializing the logits).
        """
        h = self._final_states(idx, attention_mask, position_ids, cache)
        return self.tok_emb.logits(h) if self.lm_head is None else self.lm_head(h)

    def loss(
        self,
        idx: torch.Tensor,
        targets: torch.Tensor,
        *,
        attention_mask: torch.Tensor | None = None,
        ignore_index: int = -100,
    ) -> torch.Tensor:
        """The mean cross-entropy of `forward`'s logits against `targets` (B, T), the token each position should
        predict (`ignore_index` where none), computed without materializing the logits
        (`zoo.core.linear_cross_entropy`: less memory and a faster training step). A method of its own so that
        `forward` always returns logits; `compile()` and FSDP treat it as a forward too (ZooModel.compile,
        zoo.strategies.fsdp)."""
        h = self._final_states(idx, attention_mask, None, None)
        output = self.tok_emb.weight if self.lm_head is None else self.lm_head.weight
        return linear_cross_entropy(h, output, targets, ignore_index=ignore_index)

    def _final_states(self, idx, attention_mask, position_ids, cache) -> torch.Tensor:
        """The last block stack's (normalized) output (B, T, n_embd): what the output layer reads."""
        _, t = idx.shape
        past = 0 if cache is None else cache.length
        if attention_mask is not None and bool(attention_mask.all()):
            attention_mask = None  # no padding: keep the is_causal fast path
        if position_ids is not None and self.pos_emb is None:
            raise ValueError(
                f"position_ids are for learned or sinusoidal positions, not positions='{self.config.positions}'"
            )
        if position_ids is None and self.pos_emb is not None:
            if attention_mask is None:
                position_ids = torch.arange(past, past + t, device=idx.device)[None]
            else:
                position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, -t:]
        pos = None if self.pos_emb is None else self.pos_emb(position_ids)
        x = self.drop(merge_positions(self.tok_emb(idx), pos, self.pos_merge))
        mask = None
        if attention_mask is not None and self.config.attn_window is not None:
            # A key padding mask only: the windowed path adds causality itself, without an (n, n) mask.
            mask = attention_mask.to(torch.bool)[:, None, None, :]
        elif attention_mask is not None:
            mask = build_attention_mask(attention_mask, t, past + t, causal=True)
        causal = mask is None or self.config.attn_window is not None
        # Masked batch norm's real tokens: left padding is all GPT has (none at all when the mask was dropped).
        token_mask = None if attention_mask is None else attention_mask[:, -t:].to(torch.bool)
        return self.blocks(x, mask=mask, is_causal=causal, cache=cache, token_mask=token_mask)

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token (forward + backward): 6 per weight, plus attention scores and mixing
        (the estimate of the PaLM paper, appendix B, as nanoGPT uses it)."""
        c = self.config
        n = self.num_parameters(exclude_position_embeddings=True)
        return 6 * n + 12 * c.n_layer * c.n_embd * seq_len

    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        *,
        attention_mask: torch.Tensor | None = None,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        eos_token_id: int | None = None,
        generator: torch.Generator | None = None,
        use_cache: bool = True,
    ) -> torch.Tensor:
        """Continue a batch of prompts; returns (B, T + n) ids with n <= max_new_tokens.

        Prompts of different lengths are left-padded and marked in `attention_mask`. temperature=0 is greedy.
        With learned positions, past the model's context the oldest tokens slide out of a window of `block_size`
        tokens (recomputed without the cache from then on); other positions have no length limit and keep the
        cache. Rows that produced `eos_token_id` keep emitting it; decoding stops
        when every row has.
        """
        bounded = self.config.positions == "learned"
        block = self.config.block_size if bounded else float("inf")
        if idx.dim() != 2 or idx.shape[1] == 0:
            raise ValueError(f"prompts must be a non-empty (batch, length) tensor of ids, got shape {tuple(idx.shape)}")
        if idx.shape[1] > block:
            raise ValueError(
                f"the prompt has {idx.shape[1]} tokens but the model's context is {block}; shorten the prompt"
            )
        if max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        was_training = self.training
        self.eval()
        try:
            mask = None if attention_mask is None else attention_mask.to(torch.bool)
            cache = KVCache(self.config.n_layer) if use_cache else None

            def next_logits(generated: torch.Tensor) -> torch.Tensor:
                nonlocal cache
                tokens = torch.cat([idx, generated], dim=1)
                full_mask = None if mask is None else torch.cat([mask, mask.new_ones(generated.shape)], dim=1)
                if cache is not None and tokens.shape[1] > block:
                    cache = None  # positions would run past the learned table: slide a window from now on
                if cache is not None:
                    step_input = idx if generated.shape[1] == 0 else generated[:, -1:]
                    return self(step_input, attention_mask=full_mask, cache=cache)[:, -1]
                start = max(0, tokens.shape[1] - block)
                window_mask = None if full_mask is None else full_mask[:, start:]
                return self(tokens[:, start:], attention_mask=window_mask)[:, -1]

            generated = decode_tokens(
                next_logits,
                max_new_tokens,
                batch_size=idx.shape[0],
                device=idx.device,
                eos_token_id=eos_token_id,
                temperature=temperature,
                top_k=top_k,
                top_p=top_p,
                generator=generator,
            )
            return torch.cat([idx, generated], dim=1)
        finally:
            self.train(was_training)  # also when decoding raises
