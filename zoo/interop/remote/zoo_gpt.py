"""A transformer-zoo GPT for `transformers` (trust_remote_code=True), written by its exporter: zoo's GPT
(zoo_models_gpt.py, every lab switch included) as AutoModelForCausalLM. Generation recomputes the whole window each
step (no KV cache); with learned positions the window slides over the last `block_size` tokens, as zoo's does."""

from __future__ import annotations

import torch.nn.functional as F
from transformers import GenerationMixin
from transformers.modeling_outputs import CausalLMOutput

from .zoo_hf import ZooConfig, ZooPreTrainedModel
from .zoo_models_gpt import GPT


class ZooGPTConfig(ZooConfig):
    model_type = "zoo_gpt"
    zoo_class = GPT


class ZooGPTForCausalLM(ZooPreTrainedModel, GenerationMixin):
    config_class = ZooGPTConfig
    main_input_name = "input_ids"

    @classmethod
    def _supports_default_dynamic_cache(cls):
        return False  # no KV cache: every step reads its whole window

    def get_input_embeddings(self):
        return self.zoo.tok_emb

    def get_output_embeddings(self):
        return self.zoo.lm_head

    def forward(self, input_ids, attention_mask=None, labels=None, **unused):
        """input_ids (B, T), attention_mask (B, T) with 0 at left padding -> logits (B, T, vocab); with labels
        (B, T) also the mean next-token cross-entropy (labels shifted inside, -100 ignored)."""
        logits = self.zoo(input_ids, attention_mask=attention_mask)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100)
        return CausalLMOutput(loss=loss, logits=logits)

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **unused):
        # Learned positions end at block_size: from then on the oldest tokens slide out (zoo's GPT.generate).
        block = self.config.block_size
        if self.config.positions == "learned" and input_ids.shape[1] > block:
            input_ids = input_ids[:, -block:]
            attention_mask = None if attention_mask is None else attention_mask[:, -block:]
        return {"input_ids": input_ids, "attention_mask": attention_mask}
