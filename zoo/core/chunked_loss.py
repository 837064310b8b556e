"""Cross-entropy of a linear output layer, computed in row chunks without keeping the full logits.

`F.cross_entropy(hidden @ weight.T, targets)` keeps the (tokens x vocab) logits and their log-softmax for the
backward (for GPT-2 at 8 x 1024 tokens that is 2 x 1.6 GB), then writes a gradient of the same size. Here each
chunk of rows goes matmul -> log-softmax -> gradient at once, and the two gradient matmuls run on the chunk right
away: the gradients of `hidden` and `weight` are computed during the forward (the loss is a mean, so the backward
only scales them by the incoming gradient). Nothing of vocabulary size outlives a chunk.

Chunks are as large as CHUNK_BYTES of float32 logits allows: larger matmuls are faster on CPU, and the saving
comes from the fused gradient, not from small chunks. Training step of the GPT benchmark configuration
(benchmarks/configs.py, 2048 tokens, vocab 8192) on the project's 2-core CPU: 362 ms in 256-row chunks, 341 ms
in one 64 MB chunk; HF's logits + loss path 403 ms.
The result equals `F.cross_entropy(hidden @ weight.T + bias, targets, ignore_index=..., label_smoothing=...)`
within float tolerance, in float32 and under autocast (matmuls in the autocast dtype, softmax in float32).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

CHUNK_BYTES = 64 << 20


def linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    chunk_rows: int | None = None,
) -> torch.Tensor:
    """Mean cross-entropy over the targets that are not `ignore_index` (0.0, not NaN, when every target is
    ignored, so that an all-padding batch does not poison training).

    hidden: (..., d) inputs of the output layer; weight: (vocab, d); bias: (vocab,) or None;
    targets: (...) class indices, the shape of `hidden` without its last dimension.
    chunk_rows: rows per chunk; None fits CHUNK_BYTES of float32 logits.
    """
    if hidden.shape[:-1] != targets.shape:
        raise ValueError(
            f"targets of shape {tuple(targets.shape)} do not match hidden states of shape {tuple(hidden.shape)}; "
            "give one target per position"
        )
    if weight.dim() != 2 or weight.shape[1] != hidden.shape[-1]:
        raise ValueError(f"weight must be (vocab, {hidden.shape[-1]}), got {tuple(weight.shape)}")
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
    if chunk_rows is None:
        chunk_rows = max(1, CHUNK_BYTES // (4 * weight.shape[0]))
    if chunk_rows <= 0:
        raise ValueError(f"chunk_rows must be positive, got {chunk_rows}")
    device = hidden.device.type
    _check_targets(targets, weight.shape[0], ignore_index)
    compute_dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else hidden.dtype
    hidden, targets = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1)
    needs_grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (hidden, weight, bias))
    args = (hidden, weight, bias, targets, ignore_index, label_smoothing, chunk_rows, compute_dtype)
    if not needs_grad:
        with torch.no_grad():
            return _ChunkedLinearCrossEntropy.run(*args, with_grad=False)[0]
    return _ChunkedLinearCrossEntropy.apply(*args)


def _check_targets(targets: torch.Tensor, vocab: int, ignore_index: int) -> None:
    # Read back only on eager CPU tensors: on a GPU that would be a sync per step (the gather reports it there).
    if targets.device.type != "cpu" or targets.numel() == 0 or torch.compiler.is_compiling():
        return
    counted = targets[targets != ignore_index]
    if counted.numel() == 0:
        return
    low, high = int(counted.min()), int(counted.max())
    if low < 0 or high >= vocab:
        bad = low if low < 0 else high
        raise ValueError(
            f"target {bad} is outside the {vocab} output classes (and is not ignore_index={ignore_index}); "
            "the targets and the model's vocabulary disagree"
        )


class _ChunkedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def run(hidden, weight, bias, targets, ignore_index, smoothing, chunk, compute_dtype, *, with_grad):
        with torch.autocast(hidden.device.type, enabled=False):
            n, vocab = hidden.shape[0], weight.shape[0]
            valid = targets != ignore_index
            # Mean over the counted targets; ignored rows weigh 0 in the loss and in every gradient.
            row_weight = valid.float() / valid.sum().clamp(min=1)
            safe_targets = targets.masked_fill(~valid, 0)[:, None]
            w = weight.to(compute_dtype)
            b = None if bias is None else bias.to(compute_dtype)
            row_loss = torch.empty(n, device=hidden.device)
            grad_hidden = torch.empty(n, hidden.shape[1], device=hidden.device) if with_grad else None
            grad_weight = None
            grad_bias = torch.zeros(vocab, device=hidden.device) if with_grad and bias is not None else None
            for start in range(0, n, chunk):
                rows = slice(start, start + chunk)
                h = hidden[rows].to(compute_dtype)
                logits = h @ w.t() if b is None else torch.addmm(b, h, w.t())
                # In place: the chunk's logits are ours (the matmul's output, or its float copy under autocast), and
                # writing the log-softmax over them spares a second chunk-sized buffer and its memory traffic,
                # the largest cost here besides the matmuls. Same values as the out-of-place call.
                log_probs = logits.float()
                torch.log_softmax(log_probs, dim=-1, out=log_probs)
                nll = -log_probs.gather(1, safe_targets[rows]).squeeze(1)
                if smoothing:
                    nll = (1.0 - smoothing) * nll - smoothing * log_probs.mean(dim=-1)
                row_loss[rows] = nll
                if not with_grad:
                    continue
                # d(loss_row)/d(logits) = softmax - (1 - eps) * onehot - eps / vocab; the row weights are applied
                # to the small operands (h, and grad_hidden afterwards) instead of to this chunk.
                grad_logits = log_probs.exp_()
                grad_logits.scatter_add_(1, safe_targets[rows], grad_logits.new_full((h.shape[0], 1), smoothing - 1.0))
                if smoothing:
                    grad_logits.sub_(smoothing / vocab)
                g = grad_logits.to(compute_dtype)
                grad_hidden[rows] = g @ w
                weighted_h = h * row_weight[rows, None].to(compute_dtype)
                if grad_weight is None:
                    grad_weight = (g.t() @ weighted_h).float()
                elif g.dtype == grad_weight.dtype:
                    grad_weight.addmm_(g.t(), weighted_h)  # accumulates inside the GEMM: no extra pass
                else:
                    grad_weight += g.t() @ weighted_h
                if grad_bias is not None:
                    grad_bias += grad_logits.t() @ row_weight[rows]
            loss = (row_loss * row_weight).sum()
            if with_grad:
                grad_hidden *= row_weight[:, None]
                if grad_weight is None:  # no rows at all
                    grad_weight = torch.zeros(weight.shape, device=hidden.device)
            return loss, grad_hidden, grad_weight, grad_bias

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, ignore_index, smoothing, chunk, compute_dtype):
        loss, grad_hidden, grad_weight, grad_bias = _ChunkedLinearCrossEntropy.run(
            hidden, weight, bias, targets, ignore_index, smoothing, chunk, compute_dtype, with_grad=True
        )
        ctx.dtypes = (hidden.dtype, weight.dtype, None if bias is None else bias.dtype)
        ctx.save_for_backward(grad_hidden, grad_weight, grad_bias)
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        grad_hidden, grad_weight, grad_bias = ctx.saved_tensors
        h_dtype, w_dtype, b_dtype = ctx.dtypes
        grads = [
            (grad_hidden * grad_loss).to(h_dtype) if ctx.needs_input_grad[0] else None,
            (grad_weight * grad_loss).to(w_dtype) if ctx.needs_input_grad[1] else None,
            (grad_bias * grad_loss).to(b_dtype) if grad_bias is not None and ctx.needs_input_grad[2] else None,
        ]
        return (*grads, None, None, None, None, None)


def reference_cross_entropy(hidden, weight, targets, *, bias=None, ignore_index=-100, label_smoothing=0.0):
    """The plain formulation `linear_cross_entropy` must equal (used by the tests and for comparison)."""
    logits = F.linear(hidden, weight, bias)
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(),
        targets.reshape(-1),
        ignore_index=ignore_index,
        label_smoothing=label_smoothing,
    )
