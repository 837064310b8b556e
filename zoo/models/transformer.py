"""The encoder-decoder Transformer of "Attention Is All You Need" (Vaswani et al. 2017), for translation.

Encoder: bidirectional self-attention blocks (causal with `encoder_causal`). Decoder: causal self-attention,
then cross-attention (queries from the decoder, keys/values from the encoder output), then the ReLU feed-forward.
Post-LN as in the paper, pre-LN as an option; sinusoidal positions; token embeddings scaled by sqrt(d_model); with
a joint vocabulary the source, target and output embeddings are one matrix. Numerically this is
torch.nn.Transformer with embeddings and a tied output layer around it (final norms included, as torch builds them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from zoo.core import (
    ACTIVATIONS,
    AttentionSwitches,
    BlockStack,
    BlockSwitches,
    ComputeOptions,
    KVCache,
    LearnedPositionEmbedding,
    PositionConcat,
    PositionSwitches,
    SinusoidalPositionEmbedding,
    Switches,
    TokenEmbedding,
    beam_search,
    build_attention_mask,
    check_choice,
    check_flags,
    decode_tokens,
    linear_cross_entropy,
    merge_positions,
)

from .base import ZooModel, check_heads_divide, check_positive, check_probability


@dataclass(kw_only=True)
class EncoderCausalSwitch(Switches):
    """The Transformer's own switch: its decoder is causal anyway, so the option names the encoder."""

    encoder_causal: bool = False  # True: the encoder's self-attention is causal (GPT-style)

    def check_core(self, *, d_model: int, n_heads: int) -> None:
        super().check_core(d_model=d_model, n_heads=n_heads)
        check_flags(encoder_causal=self.encoder_causal)


@dataclass
class TransformerConfig(PositionSwitches, AttentionSwitches, BlockSwitches, EncoderCausalSwitch, ComputeOptions):
    """The 2017 paper's sizes; the core's switches and options (zoo.core.switches) are inherited with the paper's
    defaults, for both stacks. RoPE, ALiBi and windows act on both self-attentions, never on cross-attention (a
    window: the decoder's w most recent tokens, the encoder's w // 2 on each side, or its w most recent with
    `encoder_causal`). Learned and sinusoidal positions stop at max_len, as the reference does."""

    src_vocab_size: int = 37000
    tgt_vocab_size: int | None = None  # None: the joint vocabulary, same as the source
    d_model: int = 512
    n_heads: int = 8
    d_ff: int = 2048
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    dropout: float = 0.1  # sub-layer outputs and the embedding sums (the paper's P_drop)
    attn_dropout: float = 0.0  # on attention weights (torch.nn.Transformer uses `dropout` here too)
    ff_dropout: float = 0.0  # after the ReLU (torch.nn.Transformer uses `dropout` here too)
    activation: str = "relu"
    norm_first: bool = False  # False: post-LN (the paper); True: pre-LN
    final_norm: bool = True  # a LayerNorm after each stack, as torch.nn.Transformer builds it
    layer_norm_eps: float = 1e-5
    max_len: int = 256  # positions per side (source and target, BOS/EOS included)
    share_embeddings: bool = True  # one matrix for source and target tokens (needs the joint vocabulary)
    tie_output: bool = True  # the output layer reuses the target embedding matrix
    pad_token_id: int = 0
    bos_token_id: int = 1
    eos_token_id: int = 2
    positions: str = field(default="sinusoidal", kw_only=True)  # PositionSwitches' field, the paper's default

    def __post_init__(self) -> None:
        if self.tgt_vocab_size is None:
            self.tgt_vocab_size = self.src_vocab_size
        check_positive(
            src_vocab_size=self.src_vocab_size,
            tgt_vocab_size=self.tgt_vocab_size,
            d_model=self.d_model,
            n_heads=self.n_heads,
            d_ff=self.d_ff,
            max_len=self.max_len,
            n_encoder_layers=self.n_encoder_layers,
            n_decoder_layers=self.n_decoder_layers,
        )
        check_heads_divide(self, "d_model", "n_heads")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
                f"share_embeddings=true needs one joint vocabulary, but src_vocab_size={self.src_vocab_size} and "
                f"tgt_vocab_size={self.tgt_vocab_size}; set share_embeddings=false for separate vocabularies"
            )
        check_probability(dropout=self.dropout, attn_dropout=self.attn_dropout, ff_dropout=self.ff_dropout)
        check_choice("activation", self.activation, ACTIVATIONS)
        self.check_core(d_model=self.d_model, n_heads=self.n_heads)
        for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
            value = getattr(self, name)
            if not 0 <= value < min(self.src_vocab_size, self.tgt_vocab_size):
                raise ValueError(f"{name}={value} is outside the vocabulary")


TRANSFORMER_PRESETS = {
    # The paper's Table 3 sizes; vocab_size comes from the tokenizer (37000 is the paper's shared BPE).
    "transformer-base": dict(d_model=512, n_heads=8, d_ff=2048, n_encoder_layers=6, n_decoder_layers=6, dropout=0.1),
    "transformer-big": dict(d_model=1024, n_heads=16, d_ff=4096, n_encoder_layers=6, n_decoder_layers=6, dropout=0.3),
    # Small sizes that train on a CPU.
    "transformer-tiny": dict(d_model=64, n_heads=4, d_ff=256, n_encoder_layers=2, n_decoder_layers=2, dropout=0.1),
    "transformer-small": dict(d_model=256, n_heads=4, d_ff=1024, n_encoder_layers=3, n_decoder_layers=3, dropout=0.1),
}


class Transformer(ZooModel):
    model_type = "transformer"
    forward_methods = ("loss",)
    config_class = TransformerConfig
    presets = TRANSFORMER_PRESETS
    reads = "text"

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__(config)
        c = config
        self.src_emb = TokenEmbedding(c.src_vocab_size, c.d_model, scale=True, padding_idx=c.pad_token_id)
        self.tgt_emb = (
            self.src_emb
            if c.share_embeddings
            else TokenEmbedding(c.tgt_vocab_size, c.d_model, scale=True, padding_idx=c.pad_token_id)
        )
        self.pos_emb = None
        if c.positions == "sinusoidal":
            self.pos_emb = SinusoidalPositionEmbedding(c.max_len, c.d_model, base=c.sinusoid_base)
        elif c.positions == "learned":
            self.pos_emb = LearnedPositionEmbedding(c.max_len, c.d_model)
        self.pos_merge = PositionConcat(c.d_model) if c.position_merge == "concat" else None
        self.drop = nn.Dropout(c.dropout) if c.dropout else nn.Identity()
        stack = dict(
            n_heads=c.n_heads,
            d_ff=c.d_ff,
            dropout=c.dropout,
            attn_dropout=c.attn_dropout,
            ff_inner_dropout=c.ff_dropout,
            activation=c.activation,
            norm_first=c.norm_first,
            norm_eps=c.layer_norm_eps,
            **c.stack_options(),
        )
        self.encoder = BlockStack(c.n_encoder_layers, c.d_model, final_norm=c.final_norm, **stack)
        self.decoder = BlockStack(c.n_decoder_layers, c.d_model, final_norm=c.final_norm, cross_attention=True, **stack)
        self.out_proj = None if c.tie_output else nn.Linear(c.d_model, c.tgt_vocab_size, bias=False)
        self.reset_parameters()

    def positions(self) -> int:
        return self.config.max_len

    def pipeline_tag(self) -> str:
        return "translation"

    def reset_parameters(self) -> None:
        """Xavier-uniform matrices (torch.nn.Transformer's choice) and N(0, d^-1/2) embeddings, which the sqrt(d)
        scale turns into unit-variance inputs (fairseq's choice for scaled, tied embeddings)."""
        for name, param in self.named_parameters():
            if name in ("src_emb.weight", "tgt_emb.weight"):
                nn.init.normal_(param, mean=0.0, std=self.config.d_model**-0.5)
                param.data[self.config.pad_token_id].zero_()
            elif name == "pos_emb.weight":  # positions="learned": the variance of a sinusoid (1/2)
                nn.init.normal_(param, mean=0.0, std=0.5**0.5)
            elif param.dim() > 1:
                nn.init.xavier_uniform_(param)
            elif name.endswith("bias"):
                nn.init.zeros_(param)

    # ---- the two halves -------------------------------------------------------------------------------
    def _embed(self, emb: TokenEmbedding, ids: torch.Tensor, offset: int = 0) -> torch.Tensor:
        if self.pos_emb is None:
            return self.drop(emb(ids))
        positions = torch.arange(offset, offset + ids.shape[1], device=ids.device)
        return self.drop(merge_positions(emb(ids), self.pos_emb(positions)[None], self.pos_merge))

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        """src: (B, S) ids; src_mask: (B, S) 1 for real tokens, 0 for padding -> (B, S, d_model)."""
        s = src.shape[1]
        keep = None if src_mask is None else src_mask.to(torch.bool)  # real tokens, for masked batch norm
        mask, is_causal = None, False
        if not self.config.encoder_causal:
            mask = None if src_mask is None else build_attention_mask(src_mask, s, s, causal=False)
        elif keep is None or bool(keep.all()):
            is_causal = True  # no padding: SDPA's is_causal fast path
        elif self.config.attn_window is not None:
            mask, is_causal = keep[:, None, None, :], True  # a key padding mask: the window adds causality itself
        else:
            mask = build_attention_mask(src_mask, s, s, causal=True)
        return self.encoder(self._embed(self.src_emb, src), mask=mask, is_causal=is_causal, token_mask=keep)

    def decode(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        *,
        tgt_mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        """tgt: (B, T) decoder inputs (BOS first), memory: the encoder output -> logits (B, T, tgt_vocab).

        tgt_mask (B, T): 1 for real tokens. Right padding needs no mask (a causal query never sees the padding
        after it), so it is only used when it has zeros, and then the outputs at padded positions are not
        meaningful. With `cache`, `tgt` holds only the new positions and the encoder keys/values are computed at
        the first call and reused.
        """
        h = self._decoder_states(tgt, memory, src_mask, tgt_mask, cache)
        return self.tgt_emb.logits(h) if self.out_proj is None else self.out_proj(h)

    def _decoder_states(self, tgt, memory, src_mask, tgt_mask, cache) -> torch.Tensor:
        past = 0 if cache is None else cache.length
        t, s = tgt.shape[1], memory.shape[1]
        self_mask = None
        if tgt_mask is not None and not bool(tgt_mask.all()) and self.config.attn_window is not None:
            self_mask = tgt_mask.to(torch.bool)[:, None, None, :]  # key mask; the window adds causality
        elif tgt_mask is not None and not bool(tgt_mask.all()):
            self_mask = build_attention_mask(tgt_mask, t, past + t, causal=True)
        cross_mask = None if src_mask is None else build_attention_mask(src_mask, t, s, causal=False)
        # Masked batch norm's real target tokens: the task marks target padding by pad ids, not by a mask.
        keep = (tgt != self.config.pad_token_id) if tgt_mask is None else tgt_mask.to(torch.bool)
        return self.decoder(
            self._embed(self.tgt_emb, tgt, offset=past),
            mask=self_mask,
            is_causal=self_mask is None or self.config.attn_window is not None,
            context=memory,
            context_mask=cross_mask,
            cache=cache,
            token_mask=keep,
        )

    def forward(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        *,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Teacher-forced logits (B, T, tgt_vocab) for decoder inputs `tgt` given the source `src`.
        The training loss is `loss` (the same network, without materializing the logits)."""
        return self.decode(tgt, self.encode(src, src_mask), src_mask, tgt_mask=tgt_mask)

    def loss(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        targets: torch.Tensor,
        *,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
        ignore_index: int = -100,
        label_smoothing: float = 0.0,
    ) -> torch.Tensor:
        """The mean (label-smoothed) cross-entropy of `forward`'s logits against `targets` (B, T), the next target
        tokens (`ignore_index` at padding), computed without materializing the logits
        (`zoo.core.linear_cross_entropy`). A method of its own so that `forward` always returns logits; `compile()`
        and FSDP treat it as a forward too (ZooModel.compile, zoo.strategies.fsdp)."""
        memory = self.encode(src, src_mask)
        h = self._decoder_states(tgt, memory, src_mask, tgt_mask, None)
        return linear_cross_entropy(
            h, self._output_layer().weight, targets, ignore_index=ignore_index, label_smoothing=label_smoothing
        )

    def _output_layer(self) -> nn.Module:
        return self.tgt_emb if self.out_proj is None else self.out_proj

    # ---- decoding -----------------------------------------------------------------------------------
    @torch.no_grad()
    def generate(
        self,
        src: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        *,
        max_new_tokens: int | None = None,
        beam_size: int = 1,
        length_penalty: float = 0.0,
        use_cache: bool = True,
        any_running: Callable[[bool], bool] | None = None,
    ) -> torch.Tensor:
        """Translate a batch of right-padded sources; returns (B, n) target ids without BOS, each row ending with
        EOS unless it reached the length limit, right-padded with pad_token_id.

        beam_size 1 is greedy decoding. max_new_tokens defaults to the source length + 50 (fairseq's a*x+b with
        a=1, b=50), capped by the model's max_len. Sources longer than max_len are an error, unless the positions
        have no length limit (rope, alibi, none): then max_len caps nothing. any_running: decode in lockstep with
        the other processes a sharded model spans (zoo.core.decoding, zoo.strategies.fsdp.lockstep); the steps
        taken then are the most any process asks for, within max_len as each process's max_new_tokens is.
        """
        c = self.config
        limit = c.max_len if self.pos_emb is not None else float("inf")
        if src.dim() != 2 or src.shape[1] == 0:
            raise ValueError(f"sources must be a non-empty (batch, length) tensor of ids, got shape {tuple(src.shape)}")
        if src.shape[1] > limit:
            raise ValueError(
                f"a source has {src.shape[1]} tokens but the model's max_len is {c.max_len}; shorten the input"
            )
        if max_new_tokens is None:
            max_new_tokens = int(min(limit, src.shape[1] + 50))
        if not 0 <= max_new_tokens <= limit:
            raise ValueError(f"max_new_tokens must be in [0, max_len={c.max_len}], got {max_new_tokens}")
        was_training = self.training
        self.eval()
        try:
            batch = src.shape[0]
            if src_mask is not None and bool(src_mask.all()):
                src_mask = None
            if beam_size > 1:  # every input repeated once per beam, in consecutive rows
                src = src.repeat_interleave(beam_size, dim=0)
                src_mask = None if src_mask is None else src_mask.repeat_interleave(beam_size, dim=0)
            memory = self.encode(src, src_mask)
            cache = KVCache(c.n_decoder_layers) if use_cache else None
            bos = torch.full((src.shape[0], 1), c.bos_token_id, dtype=torch.long, device=src.device)

            def next_logits(generated: torch.Tensor) -> torch.Tensor:
                if cache is not None:
                    step = bos if generated.shape[1] == 0 else generated[:, -1:]
                    return self.decode(step, memory, src_mask, cache=cache)[:, -1]
                return self.decode(torch.cat([bos, generated], dim=1), memory, src_mask)[:, -1]

            if beam_size == 1:
                out = decode_tokens(
                    next_logits,
                    max_new_tokens,
                    batch_size=batch,
                    device=src.device,
                    eos_token_id=c.eos_token_id,
                    temperature=0.0,
                    any_running=any_running,
                )
                out = _pad_after_eos(out, c.eos_token_id, c.pad_token_id)
            else:
                out = beam_search(
                    next_logits,
                    max_new_tokens,
                    batch_size=batch,
                    beam_size=beam_size,
                    eos_token_id=c.eos_token_id,
                    pad_token_id=c.pad_token_id,
                    device=src.device,
                    length_penalty=length_penalty,
                    reorder=None if cache is None else cache.reorder,
                    any_running=any_running,
                )
            return out
        finally:
            self.train(was_training)  # also when decoding raises


def _pad_after_eos(tokens: torch.Tensor, eos: int, pad: int) -> torch.Tensor:
    """Keep each row up to and including its first EOS; pad the rest."""
    after = (tokens == eos).long().cumsum(dim=1) - (tokens == eos).long() > 0
    return tokens.masked_fill(after, pad)
