"""BERT <-> Hugging Face BertForPreTraining / BertModel / BertForSequenceClassification.

HF keeps separate query/key/value projections; zoo's attention has one fused `qkv` matrix, so they are
concatenated on load (rows in q, k, v order) and split on save. The MLM decoder matrix is tied to the word
embeddings and its bias to `cls.predictions.bias`: neither is stored separately, as HF itself saves them.
Checkpoints converted from the original TensorFlow release name LayerNorm parameters gamma/beta; both read.
"""

from __future__ import annotations

import torch

from zoo.models.bert import BERT

_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "relu": "relu",
    "relu2": "relu2",
}
_ARCHITECTURES = {
    "pretraining": "BertForPreTraining",
    "none": "BertModel",
    "classification": "BertForSequenceClassification",
}

# HF name (below "bert.") -> zoo name, outside the layers.
_TOP = {
    "embeddings.word_embeddings.weight": "tok_emb.weight",
    "embeddings.position_embeddings.weight": "pos_emb.weight",
    "embeddings.token_type_embeddings.weight": "seg_emb.weight",
    "embeddings.LayerNorm.weight": "emb_norm.weight",
    "embeddings.LayerNorm.bias": "emb_norm.bias",
    "pooler.dense.weight": "pooler.weight",
    "pooler.dense.bias": "pooler.bias",
}
# HF suffix within encoder.layer.{i} -> zoo suffix within blocks.layers.{i} (q/k/v handled apart).
_LAYER = {
    "attention.output.dense.weight": "self_attn.out.weight",
    "attention.output.dense.bias": "self_attn.out.bias",
    "attention.output.LayerNorm.weight": "norm1.weight",
    "attention.output.LayerNorm.bias": "norm1.bias",
    "intermediate.dense.weight": "ff.fc1.weight",
    "intermediate.dense.bias": "ff.fc1.bias",
    "output.dense.weight": "ff.fc2.weight",
    "output.dense.bias": "ff.fc2.bias",
    "output.LayerNorm.weight": "norm2.weight",
    "output.LayerNorm.bias": "norm2.bias",
}
# Heads: full HF name -> zoo name.
_HEADS = {
    "cls.predictions.transform.dense.weight": "mlm.dense.weight",
    "cls.predictions.transform.dense.bias": "mlm.dense.bias",
    "cls.predictions.transform.LayerNorm.weight": "mlm.norm.weight",
    "cls.predictions.transform.LayerNorm.bias": "mlm.norm.bias",
    "cls.predictions.bias": "mlm.bias",
    "cls.seq_relationship.weight": "nsp.weight",
    "cls.seq_relationship.bias": "nsp.bias",
    "classifier.weight": "classifier.weight",
    "classifier.bias": "classifier.bias",
}
_QKV = ("query", "key", "value")
# Tensors HF may store that carry nothing of their own: tied copies and index buffers.
_SKIP = (
    "cls.predictions.decoder.weight",
    "cls.predictions.decoder.bias",
    "embeddings.position_ids",
    "embeddings.token_type_ids",
)


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
    if activation not in _ACTIVATIONS:
        raise ValueError(f"BERT hidden_act '{activation}' is not supported; use one of {list(_ACTIVATIONS)}")
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
        hidden_act=_ACTIVATIONS[activation],
        initializer_range=hf.get("initializer_range", 0.02),
        pad_token_id=hf.get("pad_token_id") or 0,
        head=head,
        classifier_dropout=hf.get("classifier_dropout"),
    )
    if head == "classification":
        config["num_labels"] = len(hf["id2label"]) if hf.get("id2label") else hf.get("num_labels", 2)
    return config


def _rename(name: str) -> str:
    # TF-converted checkpoints: LayerNorm.gamma / LayerNorm.beta
    return name.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")


def load(hf_config: dict, weights: dict[str, torch.Tensor]) -> BERT:
    weights = {_rename(k): v for k, v in weights.items()}
    model = BERT.from_config_dict(config_from_hf(hf_config, _head_of(hf_config, set(weights))))
    state: dict[str, torch.Tensor] = {}
    qkv: dict[str, dict[str, torch.Tensor]] = {}  # "i.weight" -> {"query": ..., "key": ..., "value": ...}
    for name, tensor in weights.items():
        if name.endswith(_SKIP):
            continue
        if name in _HEADS:
            state[_HEADS[name]] = tensor
            continue
        key = name.removeprefix("bert.")
        if key in _TOP:
            state[_TOP[key]] = tensor
            continue
        parts = key.split(".", 3)  # encoder, layer, i, suffix
        if len(parts) == 4 and parts[:2] == ["encoder", "layer"]:
            index, suffix = parts[2], parts[3]
            if suffix in _LAYER:
                state[f"blocks.layers.{index}.{_LAYER[suffix]}"] = tensor
                continue
            sub = suffix.split(".")  # attention, self, query, weight
            if len(sub) == 4 and sub[:2] == ["attention", "self"] and sub[2] in _QKV:
                qkv.setdefault(f"{index}.{sub[3]}", {})[sub[2]] = tensor
                continue
        raise ValueError(f"unexpected tensor '{name}' in a BERT checkpoint")
    for index_kind, parts in qkv.items():
        index, kind = index_kind.split(".")
        if set(parts) != set(_QKV):
            raise ValueError(f"BERT checkpoint layer {index} lacks attention {kind}s for {set(_QKV) - set(parts)}")
        state[f"blocks.layers.{index}.self_attn.qkv.{kind}"] = torch.cat([parts[q] for q in _QKV], dim=0)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(f"BERT checkpoint does not match: missing {missing}, unexpected {unexpected}")
    return model


def save(model: BERT) -> tuple[dict, dict[str, torch.Tensor]]:
    c = model.config
    activation = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu", "relu2": "relu2"}[c.hidden_act]
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
        "hidden_act": activation,
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
    top = {v: k for k, v in _TOP.items()}
    layer = {v: k for k, v in _LAYER.items()}
    heads = {v: k for k, v in _HEADS.items()}
    weights: dict[str, torch.Tensor] = {}
    for name, tensor in model.state_dict().items():
        if name in top:
            weights[prefix + top[name]] = tensor
        elif name in heads:
            weights[heads[name]] = tensor
        else:
            _, _, index, suffix = name.split(".", 3)  # blocks, layers, i, suffix
            base = f"{prefix}encoder.layer.{index}."
            if suffix.startswith("self_attn.qkv."):
                kind = suffix.rsplit(".", 1)[1]
                for part, chunk in zip(_QKV, tensor.chunk(3, dim=0)):
                    weights[f"{base}attention.self.{part}.{kind}"] = chunk
            else:
                weights[base + layer[suffix]] = tensor
    return config, weights
