"""Tests of zoo.core embeddings (token, position, patch) and of next-token sampling."""

from __future__ import annotations

import math

import pytest
import torch

from zoo.core import (
    LearnedPositionEmbedding,
    PatchEmbedding,
    SinusoidalPositionEmbedding,
    TokenEmbedding,
    filter_logits,
    sample_next_token,
)

TOL = dict(atol=1e-5, rtol=1e-5)


# --------------------------------------------------------------------------------------------------------------
# Position embeddings


def test_sinusoidal_values_match_formula():
    """PE[p, 2i] = sin(p / 10000^(2i/d)) and PE[p, 2i+1] = cos(p / 10000^(2i/d))."""
    d, max_len = 16, 64
    pe = SinusoidalPositionEmbedding(max_len, d)
    table = pe(torch.arange(max_len))
    assert table.shape == (max_len, d)
    for p in (0, 1, 2, 7, 30, 63):
        for i in (0, 1, 3, 7):
            angle = p / 10000 ** (2 * i / d)
            assert abs(table[p, 2 * i].item() - math.sin(angle)) <= 1e-5, (p, i)
            assert abs(table[p, 2 * i + 1].item() - math.cos(angle)) <= 1e-5, (p, i)


def test_sinusoidal_indexing_and_odd_width():
    """Sinusoidal embeddings index by position (batched) and reject an odd d_model."""
    pe = SinusoidalPositionEmbedding(32, 8)
    positions = torch.tensor([[3, 0], [31, 5]])
    out = pe(positions)
    assert out.shape == (2, 2, 8)
    torch.testing.assert_close(out[1, 0], pe(torch.arange(32))[31], **TOL)
    with pytest.raises(ValueError):
        SinusoidalPositionEmbedding(32, 7)
    with pytest.raises(ValueError, match="32"):
        pe(torch.tensor([32]))


def test_learned_position_out_of_range_raises():
    """LearnedPositionEmbedding rejects a position >= max_len with a message naming the maximum context."""
    torch.manual_seed(0)
    emb = LearnedPositionEmbedding(8, 16)
    torch.testing.assert_close(emb(torch.tensor([[0, 7]]))[0, 1], emb.weight[7], **TOL)
    with pytest.raises(ValueError, match=r"maximum context of 8"):
        emb(torch.tensor([[0, 8]]))


# --------------------------------------------------------------------------------------------------------------
# Token embeddings


def test_token_embedding_out_of_vocab_raises():
    """TokenEmbedding rejects an id >= vocab_size with a ValueError naming the id and the vocabulary size."""
    emb = TokenEmbedding(101, 16)
    emb(torch.tensor([[0, 100]]))  # the largest valid id is fine
    with pytest.raises(ValueError, match=r"101") as err:
        emb(torch.tensor([[5, 101]]))
    assert "token id 101" in str(err.value)


def test_token_embedding_negative_id_raises_naming_it():
    """A negative token id is rejected and the message names the offending id (-1), not a valid one."""
    emb = TokenEmbedding(101, 16)
    with pytest.raises(ValueError) as err:
        emb(torch.tensor([[5, -1]]))
    assert "-1" in str(err.value)


def test_token_embedding_scale_multiplies_by_sqrt_d():
    """scale=True multiplies the looked-up vectors by sqrt(d_model); the tied logits use the raw matrix."""
    torch.manual_seed(1)
    plain = TokenEmbedding(101, 16)
    scaled = TokenEmbedding(101, 16, scale=True)
    scaled.load_state_dict(plain.state_dict())
    ids = torch.tensor([[1, 50, 100]])
    torch.testing.assert_close(scaled(ids), plain(ids) * 4.0, **TOL)
    torch.testing.assert_close(plain(ids), plain.weight[ids], **TOL)
    hidden = torch.randn(2, 16)
    torch.testing.assert_close(plain.logits(hidden), hidden @ plain.weight.T, **TOL)


# --------------------------------------------------------------------------------------------------------------
# Patch embeddings


def _manual_patches(emb: PatchEmbedding, images: torch.Tensor) -> torch.Tensor:
    p = emb.patch_size
    b, c, h, w = images.shape
    patches = images.unfold(2, p, p).unfold(3, p, p)  # (B, C, H/p, W/p, p, p)
    patches = patches.permute(0, 2, 3, 1, 4, 5).reshape(b, (h // p) * (w // p), c * p * p)
    weight = emb.proj.weight.reshape(emb.proj.out_channels, -1)
    return patches @ weight.T + emb.proj.bias


@pytest.mark.parametrize("size", [(8, 8), (8, 12)])
@torch.no_grad()
def test_patch_embedding_shape_and_values(size):
    """PatchEmbedding gives (B, (H/p)*(W/p), d) equal to an unfold + matmul with the conv weights."""
    torch.manual_seed(2)
    emb = PatchEmbedding(8, 4, 3, 16)
    images = torch.randn(2, 3, *size)
    out = emb(images)
    assert out.shape == (2, (size[0] // 4) * (size[1] // 4), 16)
    torch.testing.assert_close(out, _manual_patches(emb, images), **TOL)
    assert emb.num_patches == 4


def test_patch_embedding_rejects_bad_images():
    """Wrong channel counts, non-4D inputs and sizes not divisible by the patch raise ValueError."""
    emb = PatchEmbedding(8, 4, 3, 16)
    with pytest.raises(ValueError, match="3"):
        emb(torch.randn(2, 1, 8, 8))
    with pytest.raises(ValueError):
        emb(torch.randn(3, 8, 8))
    with pytest.raises(ValueError, match="patch size"):
        emb(torch.randn(1, 3, 8, 10))
    with pytest.raises(ValueError):
        PatchEmbedding(10, 4, 3, 16)


# --------------------------------------------------------------------------------------------------------------
# filter_logits


def test_top_k_keeps_exactly_k_largest():
    """top_k keeps exactly k finite logits per row: the k largest, with their values unchanged."""
    torch.manual_seed(3)
    logits = torch.randn(4, 50)
    out = filter_logits(logits, top_k=5)
    assert (torch.isfinite(out).sum(-1) == 5).all()
    top = logits.topk(5, dim=-1).indices
    assert torch.equal(out.gather(-1, top), logits.gather(-1, top))
    assert (out == float("-inf")).sum() == 4 * 45
    # k larger than the vocabulary keeps everything.
    assert torch.equal(filter_logits(logits, top_k=500), logits)


@pytest.mark.parametrize("top_p, kept", [(0.3, 1), (0.5, 1), (0.7, 2), (0.8, 2), (0.81, 3), (0.96, 4), (1.0, 4)])
def test_top_p_keeps_smallest_prefix_reaching_p(top_p, kept):
    """top_p keeps the smallest set of most likely tokens whose probability reaches p."""
    probs = torch.tensor([[0.15, 0.5, 0.05, 0.3]])  # sorted: 0.5, 0.3, 0.15, 0.05
    out = filter_logits(probs.log(), top_p=top_p)
    finite = torch.isfinite(out)[0]
    assert int(finite.sum()) == kept
    expected = probs[0].argsort(descending=True)[:kept]
    assert set(finite.nonzero().flatten().tolist()) == set(expected.tolist())


def test_top_p_always_keeps_the_most_likely_token():
    """Even a tiny top_p keeps the single most likely token of every row."""
    torch.manual_seed(4)
    logits = torch.randn(3, 20)
    out = filter_logits(logits, top_p=1e-6)
    assert (torch.isfinite(out).sum(-1) == 1).all()
    assert torch.equal(out.argmax(-1), logits.argmax(-1))


def test_top_k_then_top_p_combined():
    """With both filters the survivors are within the top-k and form the top-p prefix of the top-k set."""
    logits = torch.tensor([[4.0, 3.0, 2.0, 1.0, 0.0]])
    out = filter_logits(logits, top_k=3, top_p=0.9)
    # Renormalized over the top 3: probs ~ [0.665, 0.245, 0.090] -> cumulative before 3rd is 0.910 >= 0.9.
    assert torch.isfinite(out)[0].tolist() == [True, True, False, False, False]


# --------------------------------------------------------------------------------------------------------------
# sample_next_token


def test_temperature_zero_is_argmax():
    """temperature=0 returns the argmax of every row, without randomness."""
    torch.manual_seed(5)
    logits = torch.randn(6, 30)
    assert torch.equal(sample_next_token(logits, temperature=0), logits.argmax(-1))


def test_seeded_generator_is_reproducible():
    """Two generators with the same seed draw the same tokens; a different seed draws different ones."""
    torch.manual_seed(6)
    logits = torch.randn(64, 30)

    def draw(seed):
        g = torch.Generator().manual_seed(seed)
        return torch.stack(
            [sample_next_token(logits, temperature=0.8, top_k=10, top_p=0.9, generator=g) for _ in range(5)]
        )

    a, b, c = draw(123), draw(123), draw(321)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert a.shape == (5, 64) and a.dtype == torch.long


def test_top_k_one_is_always_argmax():
    """Sampling with top_k=1 returns the argmax whatever the temperature and the random state."""
    torch.manual_seed(7)
    logits = torch.randn(8, 40)
    g = torch.Generator().manual_seed(0)
    for temperature in (0.5, 1.0, 5.0):
        for _ in range(10):
            tok = sample_next_token(logits, temperature=temperature, top_k=1, generator=g)
            assert torch.equal(tok, logits.argmax(-1))


def test_samples_stay_inside_the_filtered_set():
    """Sampled tokens always belong to the top-k set (many draws, high temperature)."""
    torch.manual_seed(8)
    logits = torch.randn(4, 40)
    allowed = logits.topk(3, dim=-1).indices
    g = torch.Generator().manual_seed(1)
    seen = set()
    for _ in range(100):
        tok = sample_next_token(logits, temperature=3.0, top_k=3, generator=g)
        assert (allowed == tok[:, None]).any(-1).all()
        seen.update(tok.tolist())
    assert len(seen) > 4  # it really samples rather than always taking the argmax


def test_sampling_follows_probabilities():
    """Sampling at temperature 1 follows softmax(logits): frequencies of 4000 draws are within 0.03."""
    probs = torch.tensor([0.6, 0.3, 0.1])
    logits = probs.log().expand(4000, 3)
    g = torch.Generator().manual_seed(2)
    tok = sample_next_token(logits, temperature=1.0, generator=g)
    freq = torch.bincount(tok, minlength=3).float() / 4000
    assert (freq - probs).abs().max() < 0.03


@pytest.mark.parametrize(
    "kwargs",
    [dict(top_p=0.0), dict(top_p=1.5), dict(top_p=-0.1), dict(top_k=0), dict(top_k=-3), dict(temperature=-0.1)],
)
def test_invalid_sampling_options_raise(kwargs):
    """Invalid top_p, top_k or a negative temperature raise ValueError."""
    logits = torch.randn(2, 10)
    options = dict(temperature=1.0) | kwargs
    with pytest.raises(ValueError):
        sample_next_token(logits, **options)
    if "temperature" not in kwargs:
        with pytest.raises(ValueError):
            filter_logits(logits, **kwargs)
