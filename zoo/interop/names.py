"""Renaming state dicts between a published layout (Hugging Face, timm, torchvision) and zoo's, by name patterns.

A rule pairs their name with zoo's: `{i}` is a layer number, `{p}` weight or bias, `{qkv}` query, key or value (the
three are zoo's fused `qkv`, concatenated in that order). A zoo name None drops the tensor; the first of several rules
giving one zoo name is the one written back."""

from __future__ import annotations

import re

import torch
from torch import nn

QKV = ("query", "key", "value")
_FIELDS = {"i": r"(?P<i>\d+)", "p": r"(?P<p>weight|bias)", "qkv": r"(?P<qkv>query|key|value)"}
# Hugging Face activation names -> zoo's; the inverse writes the last name of each.
HF_ACTIVATIONS = dict(gelu_pytorch_tanh="gelu_tanh", gelu_new="gelu_tanh", gelu="gelu", relu="relu", relu2="relu2")
ZOO_TO_HF_ACTIVATION = {zoo: hf for hf, zoo in HF_ACTIVATIONS.items()}


def _compile(pattern: str) -> re.Pattern:
    return re.compile(re.sub(r"\{(\w+)\}", lambda m: _FIELDS[m[1]], pattern.replace(".", r"\.")))


def rename(weights: dict[str, torch.Tensor], rules, what: str) -> dict[str, torch.Tensor]:
    """Their state dict as zoo names it; a tensor no rule names is refused in one line naming it."""
    compiled = [(_compile(theirs), ours) for theirs, ours in rules]
    state, fused = {}, {}
    for name, tensor in weights.items():
        found = next(((ours, m.groupdict()) for regex, ours in compiled if (m := regex.fullmatch(name))), None)
        if found is None:
            raise ValueError(f"unexpected tensor '{name}' in {what}")
        ours, fields = found
        if ours is not None and "qkv" in fields:
            fused.setdefault(ours.format(**fields), {})[fields["qkv"]] = tensor
        elif ours is not None:
            state[ours.format(**fields)] = tensor
    for name, parts in fused.items():
        if len(parts) < len(QKV):
            raise ValueError(f"{what} lacks the attention {', '.join(set(QKV) - set(parts))} of {name}")
        state[name] = torch.cat([parts[k] for k in QKV])
    return state


def rename_back(state: dict[str, torch.Tensor], rules) -> dict[str, torch.Tensor]:
    """zoo's state dict as they name it (the inverse of `rename`)."""
    compiled = [(_compile(ours), theirs) for theirs, ours in rules if ours is not None]
    weights = {}
    for name, tensor in state.items():
        theirs, fields = next((theirs, m.groupdict()) for regex, theirs in compiled if (m := regex.fullmatch(name)))
        if "{qkv}" in theirs:
            weights |= {theirs.format(**fields, qkv=k): part for k, part in zip(QKV, tensor.chunk(3))}
        else:
            weights[theirs.format(**fields)] = tensor
    return weights


def load_state(model: nn.Module, state: dict[str, torch.Tensor], what: str) -> nn.Module:
    """Load zoo-named weights into `model`, refusing in one line a checkpoint that leaves some unset or unused."""
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(f"{what} does not match zoo's model: missing {missing}, unexpected {unexpected}")
    return model
