"""The chunked output-layer cross-entropy equals the plain logits + F.cross_entropy formulation."""

import pytest
import torch

from zoo.core import linear_cross_entropy
from zoo.core.chunked_loss import reference_cross_entropy


def _problem(n=37, d=16, vocab=50, bias=False, ignore=-100, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(3, n, d, generator=g, requires_grad=True)
    weight = torch.randn(vocab, d, generator=g).mul_(0.3).requires_grad_()
    b = torch.randn(vocab, generator=g).requires_grad_() if bias else None
    targets = torch.randint(0, vocab, (3, n), generator=g)
    targets[0, ::5] = ignore
    return hidden, weight, b, targets


def _loss_and_grads(fn, hidden, weight, bias, targets, **kw):
    for t in (hidden, weight, bias):
        if t is not None:
            t.grad = None
    loss = fn(hidden, weight, targets, bias=bias, **kw)
    (loss * 1.7).backward()  # a non-unit incoming gradient must scale every gradient
    return [loss.detach()] + [t.grad.clone() for t in (hidden, weight, bias) if t is not None]


@pytest.mark.parametrize("chunk_rows", [1, 7, 256])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_matches_reference_in_float32(chunk_rows, bias, smoothing):
    hidden, weight, b, targets = _problem(bias=bias)
    ours = _loss_and_grads(
        linear_cross_entropy, hidden, weight, b, targets, label_smoothing=smoothing, chunk_rows=chunk_rows
    )
    ref = _loss_and_grads(reference_cross_entropy, hidden, weight, b, targets, label_smoothing=smoothing)
    for a, r in zip(ours, ref):
        torch.testing.assert_close(a, r, rtol=1e-5, atol=1e-6)


def test_custom_ignore_index_and_tied_weight_accumulates_both_gradients():
    hidden, weight, _, targets = _problem(ignore=0)
    emb = torch.nn.Embedding.from_pretrained(weight.detach().clone(), freeze=False)
    ids = targets.clamp(min=1)

    def total(loss_fn):
        emb.weight.grad = None
        h = hidden.detach() + emb(ids)  # the weight is used as input embedding and as output layer
        loss = loss_fn(h, emb.weight, targets, ignore_index=0)
        loss.backward()
        return loss.detach(), emb.weight.grad.clone()

    ours, ref = total(linear_cross_entropy), total(reference_cross_entropy)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-6)


def test_under_bf16_autocast_close_to_reference():
    hidden, weight, b, targets = _problem(n=64, d=32, vocab=300, bias=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours = _loss_and_grads(linear_cross_entropy, hidden, weight, b, targets, chunk_rows=16)
        ref = _loss_and_grads(reference_cross_entropy, hidden, weight, b, targets)
    assert all(t.dtype == torch.float32 for t in ours)
    for a, r in zip(ours, ref):
        torch.testing.assert_close(a, r, rtol=2e-2, atol=2e-3)


def test_without_grad_gives_the_loss_only():
    hidden, weight, _, targets = _problem()
    with torch.no_grad():
        loss = linear_cross_entropy(hidden, weight, targets)
    assert not loss.requires_grad
    torch.testing.assert_close(loss, reference_cross_entropy(hidden, weight, targets).detach())


def test_all_targets_ignored_is_zero_not_nan():
    hidden, weight, _, targets = _problem()
    loss = linear_cross_entropy(hidden, weight, torch.full_like(targets, -100))
    loss.backward()
    assert loss.item() == 0.0 and hidden.grad.abs().sum() == 0


def test_bad_shapes_are_named():
    hidden, weight, _, targets = _problem()
    with pytest.raises(ValueError, match="do not match hidden states"):
        linear_cross_entropy(hidden, weight, targets[:, :-1])
    with pytest.raises(ValueError, match=r"weight must be \(vocab, 16\)"):
        linear_cross_entropy(hidden, weight.t(), targets)
    with pytest.raises(ValueError, match="label_smoothing"):
        linear_cross_entropy(hidden, weight, targets, label_smoothing=1.0)


def test_empty_batch_gives_zero_loss_and_gradients():
    hidden = torch.randn(0, 4, requires_grad=True)
    weight = torch.randn(6, 4, requires_grad=True)
    loss = linear_cross_entropy(hidden, weight, torch.zeros(0, dtype=torch.long))
    loss.backward()
    assert loss.item() == 0.0 and weight.grad.abs().sum() == 0


@pytest.mark.parametrize("bad", [50, -1])
def test_out_of_range_target_is_named(bad):
    hidden, weight, _, targets = _problem()
    targets[1, 3] = bad
    with pytest.raises(ValueError, match=f"target {bad} is outside the 50 output classes"):
        linear_cross_entropy(hidden, weight, targets)
