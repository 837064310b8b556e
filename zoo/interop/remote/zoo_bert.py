"""A transformer-zoo BERT for `transformers` (trust_remote_code=True), written by its exporter: zoo's BERT
(zoo_models_bert.py, every lab switch included) as AutoModelForPreTraining / AutoModelForMaskedLM,
AutoModelForSequenceClassification or AutoModel, by the head it was trained with."""

from __future__ import annotations

import torch.nn.functional as F
from transformers.modeling_outputs import BaseModelOutputWithPooling, MaskedLMOutput, SequenceClassifierOutput

from .zoo_hf import ZooConfig, ZooPreTrainedModel
from .zoo_models_bert import BERT


class ZooBertConfig(ZooConfig):
    model_type = "zoo_bert"
    zoo_class = BERT


class ZooBertPreTrainedModel(ZooPreTrainedModel):
    """zoo's BERT with the head its config names; the subclasses differ only in what they return."""

    config_class = ZooBertConfig

    def get_input_embeddings(self):
        return self.zoo.tok_emb

    def run(self, input_ids, attention_mask=None, token_type_ids=None):
        return self.zoo(input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask)


class ZooBertModel(ZooBertPreTrainedModel):
    def forward(self, input_ids, attention_mask=None, token_type_ids=None, **unused):
        out = self.run(input_ids, attention_mask, token_type_ids)
        return BaseModelOutputWithPooling(last_hidden_state=out.hidden, pooler_output=out.pooled)


class ZooBertForPreTraining(ZooBertPreTrainedModel):
    """`logits` are the masked-LM logits (B, T, vocab) (what AutoModelForMaskedLM and the fill-mask pipeline
    read); `nsp_logits` (B, 2) the next-sentence logits (0: B follows A)."""

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None, **unused):
        out = self.run(input_ids, attention_mask, token_type_ids)
        logits = out.mlm_logits
        loss = None if labels is None else F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        result = MaskedLMOutput(loss=loss, logits=logits)
        result["nsp_logits"] = out.nsp_logits
        return result


class ZooBertForSequenceClassification(ZooBertPreTrainedModel):
    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None, **unused):
        logits = self.run(input_ids, attention_mask, token_type_ids).logits
        loss = None if labels is None else F.cross_entropy(logits, labels)
        return SequenceClassifierOutput(loss=loss, logits=logits)
