"""Boolean attention masks in the convention of `scaled_dot_product_attention`: True means "may attend"."""

from __future__ import annotations

import torch


def build_attention_mask(
    key_keep: torch.Tensor | None,
    q_len: int,
    k_len: int,
    *,
    causal: bool,
) -> torch.Tensor | None:
    """Combine a key padding mask and causality into one (batch, 1, q_len, k_len) boolean mask.

    key_keep: (batch, k_len) bool/int, 1 for real tokens and 0 for padding (Hugging Face's `attention_mask`).
    The queries are the last `q_len` of the `k_len` positions (the cached prefix comes first).
    Returns None when there is no padding mask and causality needs no mask (a single new query); callers that
    know the padding mask is all ones should drop it to keep the kernel's `is_causal` fast path.

    Under causality a left-padding query may see no real key at all; it is allowed to attend to itself so that
    its softmax stays finite (a NaN there would leak into every real row through 0 * NaN in the value product).
    """
    if key_keep is None:
        if not causal or q_len == 1:
            return None
        return _causal(q_len, k_len, device=None)
    if key_keep.shape[-1] != k_len:
        raise ValueError(
            f"attention_mask covers {key_keep.shape[-1]} positions but the keys have {k_len}; "
            "pass a mask over the cached prefix plus the new tokens"
        )
    keep = key_keep.to(torch.bool)[:, None, None, :]  # (B, 1, 1, S)
    if not causal:
        return keep
    keep = keep & _causal(q_len, k_len, device=keep.device)
    own = torch.arange(q_len, device=keep.device)
    keep[:, :, own, own + (k_len - q_len)] = True
    return keep


def _causal(q_len: int, k_len: int, device) -> torch.Tensor:
    # Query i (absolute position i + offset) may see keys 0..i+offset.
    return torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(diagonal=k_len - q_len)
