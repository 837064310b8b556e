"""A transformer-zoo encoder-decoder Transformer for `transformers` (trust_remote_code=True): AutoConfig and
AutoModelForSeq2SeqLM, with `generate` for translation.

Written by transformer-zoo's exporter; it needs torch and transformers only. Parameter names are zoo's
(zoo/models/transformer.py): src_emb (also the target embedding with a joint vocabulary), tgt_emb, pos_emb,
pos_merge, encoder, decoder, out_proj. Token vectors are scaled by sqrt(d_model) as in the 2017 paper; learned and
sinusoidal positions stop at max_len per side, as zoo's do. Decoding recomputes the decoder over the whole target
each step (no KV cache)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqLMOutput

from .zoo_config import BLOCK_SWITCH_DEFAULTS, ZooConfig
from .zoo_layers import BlockStack, PositionConcat, sinusoids

TRANSFORMER_DEFAULTS = dict(
    src_vocab_size=37000,
    tgt_vocab_size=37000,
    d_model=512,
    n_heads=8,
    d_ff=2048,
    n_encoder_layers=6,
    n_decoder_layers=6,
    activation="relu",
    norm_first=False,
    final_norm=True,
    layer_norm_eps=1e-5,
    max_len=256,
    share_embeddings=True,
    tie_output=True,
    positions="sinusoidal",
    position_merge="add",
    sinusoid_base=10000.0,
    encoder_causal=False,
    **BLOCK_SWITCH_DEFAULTS,
)


class ZooTransformerConfig(ZooConfig):
    model_type = "zoo_transformer"
    defaults = TRANSFORMER_DEFAULTS
    sizes = dict(zoo_width="d_model", zoo_heads="n_heads", zoo_ff="d_ff", zoo_eps="layer_norm_eps")
    bias = True

    def __init__(self, **kwargs):
        kwargs.setdefault("is_encoder_decoder", True)
        kwargs.setdefault("decoder_start_token_id", kwargs.get("bos_token_id", 1))  # decoding starts at BOS
        super().__init__(**kwargs)


class _Encoder:
    """What `generate` runs once per batch: the source through the encoder (not a module: its weights are the
    model's own, under zoo's names)."""

    main_input_name = "input_ids"

    def __init__(self, model):
        self.model = model

    def forward(self, input_ids, attention_mask=None, **unused):
        return BaseModelOutput(last_hidden_state=self.model.encode(input_ids, attention_mask))

    __call__ = forward


class ZooTransformerForSeq2SeqLM(PreTrainedModel, GenerationMixin):
    config_class = ZooTransformerConfig
    base_model_prefix = "zoo_transformer"
    main_input_name = "input_ids"

    def __init__(self, config):
        super().__init__(config)
        c = config
        self.src_emb = nn.Embedding(c.src_vocab_size, c.d_model)
        # One matrix for both sides with a joint vocabulary: registered once, as src_emb.
        self.tgt_emb = None if c.share_embeddings else nn.Embedding(c.tgt_vocab_size, c.d_model)
        self.pos_emb = nn.Embedding(c.max_len, c.d_model) if c.positions == "learned" else None
        self.pos_merge = PositionConcat(c.d_model) if c.position_merge == "concat" else None
        self.encoder = BlockStack(c, c.n_encoder_layers, norm_first=c.norm_first, final_norm=c.final_norm)
        self.encoder.main_input_name = "input_ids"  # generate asks the `encoder` attribute what it reads
        self.decoder = BlockStack(c, c.n_decoder_layers, norm_first=c.norm_first, final_norm=c.final_norm, cross=True)
        self.out_proj = None if c.tie_output else nn.Linear(c.d_model, c.tgt_vocab_size, bias=False)
        self.post_init()

    @classmethod
    def _supports_default_dynamic_cache(cls):
        return False  # no KV cache: every step reads the whole target

    def get_encoder(self):
        return _Encoder(self)

    def get_input_embeddings(self):
        return self.src_emb

    def _embed(self, emb, ids):
        c, n = self.config, ids.shape[1]
        if n and int(ids.max()) >= emb.num_embeddings or n and int(ids.min()) < 0:
            raise ValueError(f"token ids must be in 0..{emb.num_embeddings - 1} (the model's vocabulary)")
        x = emb(ids) * math.sqrt(c.d_model)
        if c.positions not in ("learned", "sinusoidal"):
            return x
        if n > c.max_len:
            raise ValueError(
                f"{n} tokens are more than the model's max_len={c.max_len} positions per side; shorten the source, "
                f"or generate at most {c.max_len} new tokens"
            )
        positions = torch.arange(n, device=ids.device)
        pos = self.pos_emb(positions) if c.positions == "learned" else sinusoids(positions, c.d_model, c.sinusoid_base)
        return x + pos[None] if self.pos_merge is None else self.pos_merge(x, pos[None])

    def encode(self, input_ids, attention_mask=None):
        """(B, S) source ids (EOS last), attention_mask (B, S) 1 at real tokens -> the encoder output (B, S, d)."""
        keep = None if attention_mask is None else attention_mask.to(torch.bool)
        x = self._embed(self.src_emb, input_ids)
        return self.encoder(x, causal=self.config.encoder_causal, keep=keep)

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        decoder_input_ids=None,
        decoder_attention_mask=None,
        encoder_outputs=None,
        labels=None,
        **unused,
    ):
        """Teacher-forced logits (B, T, tgt_vocab) for `decoder_input_ids` (BOS first); from `labels` (B, T) alone
        the decoder inputs are BOS + labels[:, :-1] and the loss is their cross-entropy (-100 ignored)."""
        c = self.config
        if encoder_outputs is None:
            if input_ids is None:
                raise ValueError("give input_ids (the source) or encoder_outputs")
            encoder_outputs = BaseModelOutput(last_hidden_state=self.encode(input_ids, attention_mask))
        memory = encoder_outputs[0]
        if decoder_input_ids is None:
            if labels is None:
                raise ValueError("give decoder_input_ids (BOS first) or labels")
            start = labels.new_full((labels.shape[0], 1), c.decoder_start_token_id)
            decoder_input_ids = torch.cat([start, labels[:, :-1].clamp(min=0)], dim=1)
        tgt_keep = None
        if decoder_attention_mask is not None and not bool(decoder_attention_mask.all()):
            tgt_keep = decoder_attention_mask.to(torch.bool)
        # Masked batch norm counts the non-pad target tokens when no mask says otherwise (zoo's decoder).
        norm_keep = (decoder_input_ids != c.pad_token_id) if tgt_keep is None else tgt_keep
        src_keep = None if attention_mask is None else attention_mask.to(torch.bool)
        h = self.decoder(
            self._embed(self.src_emb if self.tgt_emb is None else self.tgt_emb, decoder_input_ids),
            causal=True,
            keep=tgt_keep,
            norm_keep=norm_keep,
            context=memory,
            context_keep=src_keep,
        )
        if self.out_proj is not None:
            logits = self.out_proj(h)
        else:
            logits = h @ (self.src_emb if self.tgt_emb is None else self.tgt_emb).weight.t()
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100)
        return Seq2SeqLMOutput(loss=loss, logits=logits, encoder_last_hidden_state=memory)

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, encoder_outputs=None, **unused):
        # `input_ids` here are the decoder's tokens so far (BOS first); the source was encoded once.
        return {"decoder_input_ids": input_ids, "attention_mask": attention_mask, "encoder_outputs": encoder_outputs}
