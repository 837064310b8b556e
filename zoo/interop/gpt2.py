"""GPT-2 <-> Hugging Face GPT2LMHeadModel / GPT2Model.

HF stores GPT-2's projections as `Conv1D` with weights shaped (in, out): they are transposed into our
nn.Linear (out, in) layout and back. The output matrix is tied to `wte` and is not stored separately.
"""

from __future__ import annotations

import torch

from zoo.models.gpt import GPT

from .names import HF_ACTIVATIONS, ZOO_TO_HF_ACTIVATION, load_state, rename, rename_back

# HF name (below "transformer.") -> zoo name.
_NAMES = [
    ("wte.weight", "tok_emb.weight"),
    ("wpe.weight", "pos_emb.weight"),
    ("ln_f.{p}", "blocks.final_norm.{p}"),
    ("h.{i}.ln_1.{p}", "blocks.layers.{i}.norm1.{p}"),
    ("h.{i}.attn.c_attn.{p}", "blocks.layers.{i}.self_attn.qkv.{p}"),
    ("h.{i}.attn.c_proj.{p}", "blocks.layers.{i}.self_attn.out.{p}"),
    ("h.{i}.ln_2.{p}", "blocks.layers.{i}.norm2.{p}"),
    ("h.{i}.mlp.c_fc.{p}", "blocks.layers.{i}.ff.fc1.{p}"),
    ("h.{i}.mlp.c_proj.{p}", "blocks.layers.{i}.ff.fc2.{p}"),
    ("h.{i}.attn.bias", None),  # causal-mask buffers stored by old HF versions, not weights
    ("h.{i}.attn.masked_bias", None),
]


def _transpose_conv1d(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.t() if k.startswith("blocks.layers.") and v.dim() == 2 else v for k, v in state.items()}


def config_from_hf(hf: dict) -> dict:
    activation = hf.get("activation_function", "gelu_new")
    if activation not in HF_ACTIVATIONS:
        raise ValueError(
            f"GPT-2 activation_function '{activation}' is not supported; use one of {list(HF_ACTIVATIONS)}"
        )
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
        activation=HF_ACTIVATIONS[activation],
        tie_weights=hf.get("tie_word_embeddings", True),
    )


def load(hf_config: dict, weights: dict[str, torch.Tensor]) -> GPT:
    model = GPT.from_config_dict(config_from_hf(hf_config))
    rules = [*_NAMES, ("lm_head.weight", None if model.lm_head is None else "lm_head.weight")]
    state = rename({k.removeprefix("transformer."): v for k, v in weights.items()}, rules, "a GPT-2 checkpoint")
    return load_state(model, _transpose_conv1d(state), "GPT-2 checkpoint")


def save(model: GPT) -> tuple[dict, dict[str, torch.Tensor]]:
    c = model.config
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
        "activation_function": ZOO_TO_HF_ACTIVATION[c.activation],
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
    weights = rename_back(_transpose_conv1d(model.state_dict()), [*_NAMES, ("lm_head.weight", "lm_head.weight")])
    return config, {k if k == "lm_head.weight" else f"transformer.{k}": v for k, v in weights.items()}
