"""GPT-2 <-> Hugging Face GPT2LMHeadModel / GPT2Model.

HF stores GPT-2's projections as `Conv1D` with weights shaped (in, out): they are transposed into our
nn.Linear (out, in) layout and back. The output matrix is tied to `wte` and is not stored separately.
"""

from __future__ import annotations

import torch

from zoo.models.gpt import GPT

_ACTIVATIONS = {
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu": "gelu",
    "relu": "relu",
    "relu2": "relu2",
}
_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")

# HF suffix within a layer -> our suffix within a block.
_LAYER_NAMES = {
    "ln_1.weight": "norm1.weight",
    "ln_1.bias": "norm1.bias",
    "attn.c_attn.weight": "self_attn.qkv.weight",
    "attn.c_attn.bias": "self_attn.qkv.bias",
    "attn.c_proj.weight": "self_attn.out.weight",
    "attn.c_proj.bias": "self_attn.out.bias",
    "ln_2.weight": "norm2.weight",
    "ln_2.bias": "norm2.bias",
    "mlp.c_fc.weight": "ff.fc1.weight",
    "mlp.c_fc.bias": "ff.fc1.bias",
    "mlp.c_proj.weight": "ff.fc2.weight",
    "mlp.c_proj.bias": "ff.fc2.bias",
}
_TOP_NAMES = {
    "wte.weight": "tok_emb.weight",
    "wpe.weight": "pos_emb.weight",
    "ln_f.weight": "blocks.final_norm.weight",
    "ln_f.bias": "blocks.final_norm.bias",
}


def config_from_hf(hf: dict) -> dict:
    activation = hf.get("activation_function", "gelu_new")
    if activation not in _ACTIVATIONS:
        raise ValueError(f"GPT-2 activation_function '{activation}' is not supported; use one of {list(_ACTIVATIONS)}")
    for flag in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"):
        if hf.get(flag):
            raise ValueError(f"GPT-2 option {flag}=true is not supported by zoo's GPT")
    if hf.get("scale_attn_weights", True) is False:
        raise ValueError("GPT-2 option scale_attn_weights=false is not supported by zoo's GPT")
    inner = hf.get("n_inner")
    return dict(
        vocab_size=hf["vocab_size"],
        block_size=hf.get("n_positions", hf.get("n_ctx", 1024)),
        n_layer=hf["n_layer"],
        n_head=hf["n_head"],
        n_embd=hf["n_embd"],
        n_inner=None if inner == 4 * hf["n_embd"] else inner,  # None: GPT-2's own 4 * n_embd
        dropout=hf.get("resid_pdrop", 0.0),
        layer_norm_eps=hf.get("layer_norm_epsilon", 1e-5),
        activation=_ACTIVATIONS[activation],
        tie_weights=hf.get("tie_word_embeddings", True),
    )


def load(hf_config: dict, weights: dict[str, torch.Tensor]) -> GPT:
    model = GPT.from_config_dict(config_from_hf(hf_config))
    state: dict[str, torch.Tensor] = {}
    for name, tensor in weights.items():
        key = name.removeprefix("transformer.")
        if key == "lm_head.weight":
            if model.lm_head is not None:
                state["lm_head.weight"] = tensor
            continue
        if key in _TOP_NAMES:
            state[_TOP_NAMES[key]] = tensor
            continue
        parts = key.split(".", 2)
        if len(parts) == 3 and parts[2] in ("attn.bias", "attn.masked_bias"):
            continue  # causal-mask buffers stored by old HF versions, not weights
        if parts[0] != "h" or len(parts) < 3 or parts[2] not in _LAYER_NAMES:
            raise ValueError(f"unexpected tensor '{name}' in a GPT-2 checkpoint")
        suffix = parts[2]
        state[f"blocks.layers.{parts[1]}.{_LAYER_NAMES[suffix]}"] = tensor.t() if suffix in _CONV1D else tensor
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if m != "lm_head.weight" or model.lm_head is not None]
    if missing or unexpected:
        raise ValueError(f"GPT-2 checkpoint does not match: missing {missing}, unexpected {unexpected}")
    return model


def save(model: GPT) -> tuple[dict, dict[str, torch.Tensor]]:
    c = model.config
    activation = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu", "relu2": "relu2"}[c.activation]
    if not c.bias:
        raise ValueError("GPT-2 checkpoints need bias=True; this model was built with bias=False")
    config = {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": c.vocab_size,
        "n_positions": c.block_size,
        "n_ctx": c.block_size,
        "n_embd": c.n_embd,
        "n_layer": c.n_layer,
        "n_head": c.n_head,
        "n_inner": c.n_inner,
        "activation_function": activation,
        "resid_pdrop": c.dropout,
        "embd_pdrop": c.dropout,
        "attn_pdrop": c.dropout,
        "layer_norm_epsilon": c.layer_norm_eps,
        "initializer_range": 0.02,
        "tie_word_embeddings": c.tie_weights,
        # The model alone does not know its tokenizer's special tokens: save_hf fills them in when told
        # (a zoo-trained BPE has <|endoftext|> at id 0, GPT-2's own vocabulary at 50256, characters have none).
        "bos_token_id": None,
        "eos_token_id": None,
    }
    ours_to_hf_top = {v: k for k, v in _TOP_NAMES.items()}
    ours_to_hf_layer = {v: k for k, v in _LAYER_NAMES.items()}
    weights: dict[str, torch.Tensor] = {}
    for name, tensor in model.state_dict().items():
        if name in ours_to_hf_top:
            weights["transformer." + ours_to_hf_top[name]] = tensor
        elif name == "lm_head.weight":
            weights["lm_head.weight"] = tensor
        else:
            _, _, index, suffix = name.split(".", 3)
            hf_suffix = ours_to_hf_layer[suffix]
            weights[f"transformer.h.{index}.{hf_suffix}"] = tensor.t() if hf_suffix in _CONV1D else tensor
    return config, weights
