"""BERT <-> Hugging Face BertForPreTraining / BertModel / BertForSequenceClassification.

HF keeps separate query/key/value projections; zoo's attention has one fused `qkv` matrix, so they are
concatenated on load (rows in q, k, v order) and split on save. The MLM decoder matrix is tied to the word
embeddings and its bias to `cls.predictions.bias`: neither is stored separately, as HF itself saves them.
Checkpoints converted from the original TensorFlow release name LayerNorm parameters gamma/beta; both read.
"""

from __future__ import annotations

import torch

from zoo.models.bert import BERT

from .names import HF_ACTIVATIONS, ZOO_TO_HF_ACTIVATION, load_state, rename, rename_back

_ARCHITECTURES = {
    "pretraining": "BertForPreTraining",
    "none": "BertModel",
    "classification": "BertForSequenceClassification",
}
_HEADS = ("cls.", "classifier.")  # HF names of the heads, outside "bert."
# HF name (below "bert.") -> zoo name.
_NAMES = [
    ("embeddings.word_embeddings.weight", "tok_emb.weight"),
    ("embeddings.position_embeddings.weight", "pos_emb.weight"),
    ("embeddings.token_type_embeddings.weight", "seg_emb.weight"),
    ("embeddings.LayerNorm.{p}", "emb_norm.{p}"),
    ("pooler.dense.{p}", "pooler.{p}"),
    ("encoder.layer.{i}.attention.self.{qkv}.{p}", "blocks.layers.{i}.self_attn.qkv.{p}"),
    ("encoder.layer.{i}.attention.output.dense.{p}", "blocks.layers.{i}.self_attn.out.{p}"),
    ("encoder.layer.{i}.attention.output.LayerNorm.{p}", "blocks.layers.{i}.norm1.{p}"),
    ("encoder.layer.{i}.intermediate.dense.{p}", "blocks.layers.{i}.ff.fc1.{p}"),
    ("encoder.layer.{i}.output.dense.{p}", "blocks.layers.{i}.ff.fc2.{p}"),
    ("encoder.layer.{i}.output.LayerNorm.{p}", "blocks.layers.{i}.norm2.{p}"),
    ("cls.predictions.transform.dense.{p}", "mlm.dense.{p}"),
    ("cls.predictions.transform.LayerNorm.{p}", "mlm.norm.{p}"),
    ("cls.predictions.bias", "mlm.bias"),
    ("cls.seq_relationship.{p}", "nsp.{p}"),
    ("classifier.{p}", "classifier.{p}"),
    # Tensors HF may store that carry nothing of their own: tied copies and index buffers.
    ("cls.predictions.decoder.{p}", None),
    ("embeddings.position_ids", None),
    ("embeddings.token_type_ids", None),
]


def _head_of(hf: dict, names: set[str]) -> str:
    """Which head a checkpoint has: from the weights, since `architectures` is optional in config.json."""
    if "classifier.weight" in names:
        return "classification"
    if "cls.seq_relationship.weight" in names:
        return "pretraining"
    if any(n.startswith("cls.") for n in names):
        raise ValueError(
            f"BERT checkpoint with architectures {hf.get('architectures')} is not supported; "
            "zoo reads BertForPreTraining, BertModel and BertForSequenceClassification"
        )
    return "none"


def config_from_hf(hf: dict, head: str) -> dict:
    activation = hf.get("hidden_act", "gelu")
    if activation not in HF_ACTIVATIONS:
        raise ValueError(f"BERT hidden_act '{activation}' is not supported; use one of {list(HF_ACTIVATIONS)}")
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(
            f"BERT position_embedding_type '{hf['position_embedding_type']}' is not supported "
            "(zoo's BERT has absolute learned positions)"
        )
    if hf.get("is_decoder") or hf.get("add_cross_attention"):
        raise ValueError("BERT as a decoder (is_decoder / add_cross_attention) is not supported by zoo's BERT")
    if hf.get("tie_word_embeddings", True) is False and head == "pretraining":
        raise ValueError("BERT with tie_word_embeddings=false is not supported (zoo ties the MLM decoder)")
    config = dict(
        vocab_size=hf["vocab_size"],
        hidden_size=hf["hidden_size"],
        num_hidden_layers=hf["num_hidden_layers"],
        num_attention_heads=hf["num_attention_heads"],
        intermediate_size=hf["intermediate_size"],
        max_position_embeddings=hf.get("max_position_embeddings", 512),
        type_vocab_size=hf.get("type_vocab_size", 2),
        hidden_dropout_prob=hf.get("hidden_dropout_prob", 0.1),
        attention_probs_dropout_prob=hf.get("attention_probs_dropout_prob", 0.1),
        layer_norm_eps=hf.get("layer_norm_eps", 1e-12),
        hidden_act=HF_ACTIVATIONS[activation],
        initializer_range=hf.get("initializer_range", 0.02),
        pad_token_id=hf.get("pad_token_id") or 0,
        head=head,
        classifier_dropout=hf.get("classifier_dropout"),
    )
    if head == "classification":
        config["num_labels"] = len(hf["id2label"]) if hf.get("id2label") else hf.get("num_labels", 2)
    return config


def load(hf_config: dict, weights: dict[str, torch.Tensor]) -> BERT:
    # TF-converted checkpoints name LayerNorm parameters gamma / beta.
    weights = {
        k.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias"): v
        for k, v in weights.items()
    }
    model = BERT.from_config_dict(config_from_hf(hf_config, _head_of(hf_config, set(weights))))
    state = rename({k.removeprefix("bert."): v for k, v in weights.items()}, _NAMES, "a BERT checkpoint")
    return load_state(model, state, "BERT checkpoint")


def save(model: BERT) -> tuple[dict, dict[str, torch.Tensor]]:
    c = model.config
    config = {
        "architectures": [_ARCHITECTURES[c.head]],
        "model_type": "bert",
        "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size,
        "num_hidden_layers": c.num_hidden_layers,
        "num_attention_heads": c.num_attention_heads,
        "intermediate_size": c.intermediate_size,
        "max_position_embeddings": c.max_position_embeddings,
        "type_vocab_size": c.type_vocab_size,
        "hidden_dropout_prob": c.hidden_dropout_prob,
        "attention_probs_dropout_prob": c.attention_probs_dropout_prob,
        "layer_norm_eps": c.layer_norm_eps,
        "hidden_act": ZOO_TO_HF_ACTIVATION[c.hidden_act],
        "initializer_range": c.initializer_range,
        "pad_token_id": c.pad_token_id,
        "position_embedding_type": "absolute",
        "classifier_dropout": c.classifier_dropout,
        "tie_word_embeddings": True,
    }
    if c.head == "classification":
        config["id2label"] = {str(i): f"LABEL_{i}" for i in range(c.num_labels)}
        config["label2id"] = {f"LABEL_{i}": i for i in range(c.num_labels)}
    prefix = "" if c.head == "none" else "bert."  # HF's BertModel has no "bert." prefix
    weights = rename_back(model.state_dict(), _NAMES)
    return config, {k if k.startswith(_HEADS) else prefix + k: v for k, v in weights.items()}
