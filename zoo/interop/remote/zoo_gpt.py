"""A transformer-zoo GPT for `transformers` (trust_remote_code=True): AutoConfig and AutoModelForCausalLM.

Written by transformer-zoo's exporter; it needs torch and transformers only. Parameter names are zoo's GPT's
(zoo/models/gpt.py), every lab switch of the core included (zoo_layers.py). Generation recomputes the whole window
each step (no KV cache); with learned positions the window slides over the last `block_size` tokens once the
sequence is longer, as zoo's own GPT.generate does, so generating past the trained context never runs off the
position table."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutput

from .zoo_config import BLOCK_SWITCH_DEFAULTS, ZooConfig
from .zoo_layers import BlockStack, PositionConcat, embed_with_positions

# zoo's GPTConfig fields and defaults (GPT-2 with every switch at its reference value).
GPT_DEFAULTS = dict(
    vocab_size=50257,
    block_size=1024,
    n_layer=12,
    n_head=12,
    n_embd=768,
    n_inner=None,
    bias=True,
    layer_norm_eps=1e-5,
    activation="gelu_tanh",
    tie_weights=True,
    positions="learned",
    position_merge="add",
    sinusoid_base=10000.0,
    **BLOCK_SWITCH_DEFAULTS,
)


class ZooGPTConfig(ZooConfig):
    model_type = "zoo_gpt"
    defaults = GPT_DEFAULTS
    sizes = dict(
        zoo_width="n_embd", zoo_heads="n_head", zoo_ff=lambda c: c.n_inner or 4 * c.n_embd, zoo_eps="layer_norm_eps"
    )


class ZooGPTForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = ZooGPTConfig
    base_model_prefix = "zoo_gpt"
    main_input_name = "input_ids"

    def __init__(self, config):
        super().__init__(config)
        c = config
        self.tok_emb = nn.Embedding(c.vocab_size, c.n_embd)
        self.pos_emb = nn.Embedding(c.block_size, c.n_embd) if c.positions == "learned" else None
        self.pos_merge = PositionConcat(c.n_embd) if c.position_merge == "concat" else None
        self.blocks = BlockStack(c, c.n_layer, norm_first=True, final_norm=True)
        self.lm_head = None if c.tie_weights else nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.post_init()

    @classmethod
    def _supports_default_dynamic_cache(cls):
        return False  # no KV cache: every step reads its whole window

    def get_input_embeddings(self):
        return self.tok_emb

    def get_output_embeddings(self):
        return self.lm_head

    def forward(self, input_ids, attention_mask=None, labels=None, **unused):
        """input_ids (B, T), attention_mask (B, T) with 0 at left padding -> logits (B, T, vocab); with labels
        (B, T) also the mean next-token cross-entropy (labels shifted inside, -100 ignored)."""
        c, t = self.config, input_ids.shape[1]
        if input_ids.numel() and (int(input_ids.max()) >= c.vocab_size or int(input_ids.min()) < 0):
            raise ValueError(f"token ids must be in 0..{c.vocab_size - 1} (the model's vocabulary)")
        keep = None if attention_mask is None or bool(attention_mask.all()) else attention_mask.to(torch.bool)
        if keep is None:
            position_ids = torch.arange(t, device=input_ids.device)[None]
        else:  # counted over real tokens, as zoo's GPT and transformers' GPT-2 do
            position_ids = (keep.long().cumsum(-1) - 1).clamp(min=0)
        if c.positions == "learned" and t > c.block_size:
            raise ValueError(
                f"{t} tokens are more than the model's {c.block_size} learned positions; shorten the input "
                "(generate slides its window by itself)"
            )
        x = embed_with_positions(self.tok_emb(input_ids), position_ids, c, self.pos_emb, self.pos_merge, c.block_size)
        h = self.blocks(x, causal=True, keep=keep)
        logits = h @ self.tok_emb.weight.t() if self.lm_head is None else self.lm_head(h)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100)
        return CausalLMOutput(loss=loss, logits=logits)

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **unused):
        # Learned positions end at block_size: from then on the oldest tokens slide out (zoo's GPT.generate).
        if self.config.positions == "learned" and input_ids.shape[1] > self.config.block_size:
            input_ids = input_ids[:, -self.config.block_size :]
            attention_mask = None if attention_mask is None else attention_mask[:, -self.config.block_size :]
        return {"input_ids": input_ids, "attention_mask": attention_mask}
