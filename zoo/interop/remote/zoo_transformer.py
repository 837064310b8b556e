"""A transformer-zoo encoder-decoder Transformer for `transformers` (trust_remote_code=True), written by its exporter:
zoo's Transformer (zoo_models_transformer.py, every lab switch included) as AutoModelForSeq2SeqLM. Learned and
sinusoidal positions stop at max_len per side; decoding recomputes the whole target each step (no KV cache)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import GenerationMixin
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqLMOutput

from .zoo_hf import ZooConfig, ZooPreTrainedModel
from .zoo_models_transformer import Transformer


class ZooTransformerConfig(ZooConfig):
    model_type = "zoo_transformer"
    zoo_class = Transformer

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


class ZooTransformerForSeq2SeqLM(ZooPreTrainedModel, GenerationMixin):
    config_class = ZooTransformerConfig
    main_input_name = "input_ids"

    @classmethod
    def _supports_default_dynamic_cache(cls):
        return False  # no KV cache: every step reads the whole target

    def get_encoder(self):
        return _Encoder(self)

    def get_input_embeddings(self):
        return self.zoo.src_emb

    def _check_length(self, ids):
        c = self.config
        if self.zoo.pos_emb is not None and ids.shape[1] > c.max_len:
            raise ValueError(
                f"{ids.shape[1]} tokens are more than the model's max_len={c.max_len} positions per side; shorten "
                f"the source, or generate at most {c.max_len} new tokens"
            )

    def encode(self, input_ids, attention_mask=None):
        """(B, S) source ids (EOS last), attention_mask (B, S) 1 at real tokens -> the encoder output (B, S, d)."""
        self._check_length(input_ids)
        return self.zoo.encode(input_ids, attention_mask)

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
        if encoder_outputs is None:
            if input_ids is None:
                raise ValueError("give input_ids (the source) or encoder_outputs")
            encoder_outputs = BaseModelOutput(last_hidden_state=self.encode(input_ids, attention_mask))
        memory = encoder_outputs[0]
        if decoder_input_ids is None:
            if labels is None:
                raise ValueError("give decoder_input_ids (BOS first) or labels")
            start = labels.new_full((labels.shape[0], 1), self.config.decoder_start_token_id)
            decoder_input_ids = torch.cat([start, labels[:, :-1].clamp(min=0)], dim=1)
        self._check_length(decoder_input_ids)
        logits = self.zoo.decode(decoder_input_ids, memory, attention_mask, tgt_mask=decoder_attention_mask)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100)
        return Seq2SeqLMOutput(loss=loss, logits=logits, encoder_last_hidden_state=memory)

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, encoder_outputs=None, **unused):
        # `input_ids` here are the decoder's tokens so far (BOS first); the source was encoded once.
        return {"decoder_input_ids": input_ids, "attention_mask": attention_mask, "encoder_outputs": encoder_outputs}
