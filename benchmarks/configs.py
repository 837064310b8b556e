"""The benchmark configurations of issue 7: for each, zoo's model and the peers, same sizes, same loss.

Each builder returns (workloads, flops_per_step, items_per_step, unit). FLOPs are the model's (6 per parameter
per token for forward + backward, plus attention), identical for every implementation of a configuration.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from zoo.models import GPT, GPTConfig

from .harness import Workload


def _lm_loss(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def _attention_flops(n_layers: int, d_model: int, seq: int) -> int:
    # QK^T and AV: 2 * 2 * seq * d per token and layer forward, x3 with the backward.
    return 12 * n_layers * d_model * seq


# ---- GPT ---------------------------------------------------------------------------------------------
GPT_SIZE = dict(vocab=8192, layers=4, heads=4, d=256, seq=256, batch=8)


def _hf_gpt2(impl: str):
    from transformers import GPT2Config, GPT2LMHeadModel

    s = GPT_SIZE
    config = GPT2Config(vocab_size=s["vocab"], n_positions=s["seq"], n_embd=s["d"], n_layer=s["layers"],
                        n_head=s["heads"], resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        attn_implementation=impl)
    return GPT2LMHeadModel(config)


def _zoo_gpt(**overrides) -> GPT:
    s = GPT_SIZE
    return GPT(GPTConfig(vocab_size=s["vocab"], block_size=s["seq"], n_layer=s["layers"], n_head=s["heads"],
                         n_embd=s["d"], dropout=0.0, activation="gelu_tanh", **overrides))


def gpt():
    s = GPT_SIZE

    def batch():
        return (torch.randint(0, s["vocab"], (s["batch"], s["seq"])),)

    def zoo_loss(model, b):
        return _lm_loss(model(b[0]), b[0])

    def hf_loss(model, b):
        return _lm_loss(model(input_ids=b[0]).logits, b[0])

    workloads = [
        Workload("zoo", _zoo_gpt, batch, zoo_loss, lambda m, b: m(b[0])),
        Workload("hf-sdpa", lambda: _hf_gpt2("sdpa"), batch, hf_loss, lambda m, b: m(input_ids=b[0]).logits),
        Workload("hf-eager", lambda: _hf_gpt2("eager"), batch, hf_loss, lambda m, b: m(input_ids=b[0]).logits),
    ]
    tokens = s["batch"] * s["seq"]
    probe = _zoo_gpt()
    flops = probe.flops_per_token(s["seq"]) * tokens
    return workloads, flops, tokens, "tokens"


# ---- generation ----------------------------------------------------------------------------------------
GENERATION = dict(prompt=16, new_tokens=240)


def generation_models():
    """(name, model, generate(model, prompt) -> ids) for zoo and HF's generate with its KV cache, greedy."""
    n = GENERATION["new_tokens"]
    zoo = _zoo_gpt().eval()
    hf = _hf_gpt2("sdpa").eval()
    hf.load_state_dict(_zoo_weights_as_hf(zoo))

    def zoo_generate(model, prompt):
        return model.generate(prompt, n, temperature=0.0)

    def hf_generate(model, prompt):
        return model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n, min_new_tokens=n,
                              do_sample=False, pad_token_id=0)

    return [("zoo", zoo, zoo_generate), ("hf", hf, hf_generate)]


def _zoo_weights_as_hf(model: GPT) -> dict:
    # Same weights in both, so both decode the same tokens and the comparison is of speed alone.
    from zoo.interop import gpt2

    _, weights = gpt2.save(model)
    weights["lm_head.weight"] = weights["transformer.wte.weight"]
    return weights


CONFIGS = {"gpt": gpt}
