"""A transformer-zoo BERT for `transformers` (trust_remote_code=True): AutoConfig and, by the head it was trained
with, AutoModelForPreTraining / AutoModelForMaskedLM (MLM + NSP), AutoModelForSequenceClassification or AutoModel.

Written by transformer-zoo's exporter; it needs torch and transformers only. Parameter names are zoo's BERT's
(zoo/models/bert.py): tok_emb, pos_emb, pos_merge, seg_emb, emb_norm, blocks, pooler, mlm, nsp, classifier. It
computes the lab's switches (zoo_layers.py), causal attention included (the pooled vector then comes from the last
real token instead of [CLS])."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithPooling, MaskedLMOutput, SequenceClassifierOutput

from .zoo_config import BLOCK_SWITCH_DEFAULTS, ZooConfig
from .zoo_layers import ACTIVATIONS, BlockStack, PositionConcat, embed_with_positions, make_norm

BERT_DEFAULTS = dict(
    vocab_size=30522,
    hidden_size=768,
    num_hidden_layers=12,
    num_attention_heads=12,
    intermediate_size=3072,
    max_position_embeddings=512,
    type_vocab_size=2,
    layer_norm_eps=1e-12,
    hidden_act="gelu",
    head="pretraining",
    positions="learned",
    position_merge="add",
    sinusoid_base=10000.0,
    causal=False,
    **BLOCK_SWITCH_DEFAULTS,
)


class ZooBertConfig(ZooConfig):
    model_type = "zoo_bert"
    defaults = BERT_DEFAULTS
    sizes = dict(
        zoo_width="hidden_size", zoo_heads="num_attention_heads", zoo_ff="intermediate_size", zoo_eps="layer_norm_eps"
    )
    bias = True  # zoo's BERT always has biases

    @property
    def activation(self):  # the name zoo_layers reads
        return self.hidden_act


class MLMHead(nn.Module):
    def __init__(self, hidden, vocab_size, activation, eps):
        super().__init__()
        self.dense, self.act = nn.Linear(hidden, hidden), ACTIVATIONS[activation]()
        self.norm, self.bias = nn.LayerNorm(hidden, eps=eps), nn.Parameter(torch.zeros(vocab_size))

    def forward(self, hidden, embedding):
        return F.linear(self.norm(self.act(self.dense(hidden))), embedding.weight, self.bias)


class ZooBertPreTrainedModel(PreTrainedModel):
    """zoo's BERT with the head its config names; the subclasses differ only in what they return."""

    config_class = ZooBertConfig
    base_model_prefix = "zoo_bert"

    def __init__(self, config):
        super().__init__(config)
        c = config
        d = c.hidden_size
        self.tok_emb = nn.Embedding(c.vocab_size, d)
        self.pos_emb = nn.Embedding(c.max_position_embeddings, d) if c.positions == "learned" else None
        self.pos_merge = PositionConcat(d) if c.position_merge == "concat" else None
        self.seg_emb = nn.Embedding(c.type_vocab_size, d)
        self.emb_norm = make_norm(c.norm, d, c.layer_norm_eps)
        self.blocks = BlockStack(c, c.num_hidden_layers, norm_first=False, final_norm=False)
        self.pooler = nn.Linear(d, d)
        if c.head == "pretraining":
            self.mlm = MLMHead(d, c.vocab_size, c.hidden_act, c.layer_norm_eps)
            self.nsp = nn.Linear(d, 2)
        elif c.head == "classification":
            self.classifier = nn.Linear(d, c.num_labels)
        self.post_init()

    def get_input_embeddings(self):
        return self.tok_emb

    def encode(self, input_ids, token_type_ids=None, attention_mask=None):
        """(B, T) ids -> hidden states (B, T, H) and the pooled vector tanh(W h + b) (B, H)."""
        c, t = self.config, input_ids.shape[1]
        if input_ids.numel() and (int(input_ids.max()) >= c.vocab_size or int(input_ids.min()) < 0):
            raise ValueError(f"token ids must be in 0..{c.vocab_size - 1} (the model's vocabulary)")
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        keep = None if attention_mask is None else attention_mask.to(torch.bool)
        position_ids = torch.arange(t, device=input_ids.device)[None]
        x = embed_with_positions(
            self.tok_emb(input_ids), position_ids, c, self.pos_emb, self.pos_merge, c.max_position_embeddings
        )
        x = self.emb_norm(x + self.seg_emb(token_type_ids), keep)
        hidden = self.blocks(x, causal=c.causal, keep=keep)  # all ones: the same as none, for attention and norms
        if not c.causal:
            token = hidden[:, 0]
        elif keep is None:
            token = hidden[:, -1]
        else:  # the last real token: under causal attention the only one that has seen the whole input
            positions = torch.arange(t, device=hidden.device)
            last = torch.where(keep, positions, -1).amax(dim=-1).clamp(min=0)
            token = hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
        return hidden, torch.tanh(self.pooler(token))


class ZooBertModel(ZooBertPreTrainedModel):
    def forward(self, input_ids, attention_mask=None, token_type_ids=None, **unused):
        hidden, pooled = self.encode(input_ids, token_type_ids, attention_mask)
        return BaseModelOutputWithPooling(last_hidden_state=hidden, pooler_output=pooled)


class ZooBertForPreTraining(ZooBertPreTrainedModel):
    """`logits` are the masked-LM logits (B, T, vocab) (what AutoModelForMaskedLM and the fill-mask pipeline
    read); `nsp_logits` (B, 2) the next-sentence logits (0: B follows A)."""

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None, **unused):
        hidden, pooled = self.encode(input_ids, token_type_ids, attention_mask)
        logits = self.mlm(hidden, self.tok_emb)
        loss = None if labels is None else F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        out = MaskedLMOutput(loss=loss, logits=logits)
        out["nsp_logits"] = self.nsp(pooled)
        return out


class ZooBertForSequenceClassification(ZooBertPreTrainedModel):
    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None, **unused):
        _, pooled = self.encode(input_ids, token_type_ids, attention_mask)
        logits = self.classifier(pooled)
        loss = None if labels is None else F.cross_entropy(logits, labels)
        return SequenceClassifierOutput(loss=loss, logits=logits)
