"""Short, stable names for layers and parameter groups in probe metrics (probe/<what>/<layer or group>)."""

from __future__ import annotations

import re

from torch import nn

from zoo.core import MultiHeadAttention

_LAYER = re.compile(r"layers\.(\d+)")


def attention_modules(net: nn.Module) -> dict[str, MultiHeadAttention]:
    """Label -> attention module, in module order."""
    return {layer_label(path): m for path, m in net.named_modules() if isinstance(m, MultiHeadAttention)}


def layer_label(path: str) -> str:
    """'blocks.layers.3.self_attn' -> 'l3'; 'decoder.layers.1.cross_attn' -> 'decoder.l1.cross'.

    The stack's name is kept when the model has several (encoder/decoder); cross-attention is marked."""
    match = _LAYER.search(path)
    if match is None:
        return path or "model"
    # The task's `net.`, and the generic containers, say nothing: keep only a named stack (encoder / decoder).
    named = [c for c in path[: match.start()].split(".") if c and c not in ("net", "model", "blocks", "layers")]
    label = f"l{match.group(1)}"
    if named:
        label = f"{named[-1]}.{label}"
    return label + (".cross" if "cross" in path[match.end() :] else "")


def param_group(path: str, attention_paths: set[str]) -> str:
    """The group of a parameter for gradient norms: attn.<projection>, ffn, norm, embedding or head."""
    for attn in attention_paths:
        if path.startswith(attn + "."):
            return "attn." + path[len(attn) + 1 :].split(".")[0]
    parts = path.split(".")
    if any(p.startswith("ff") or p == "mlp" for p in parts):
        return "ffn"
    if any("norm" in p or p in ("ln", "ln_f") for p in parts):
        return "norm"
    if any("emb" in p for p in parts):
        return "embedding"
    return "head"
