"""Decoding: the shared loops of zoo.core.decoding, and the Transformer's greedy and beam-search translation."""

from __future__ import annotations

import math

import pytest
import torch

from zoo.core import beam_search, decode_tokens, length_penalty_factor
from zoo.models import Transformer, TransformerConfig

VOCAB, PAD, BOS, EOS = 41, 0, 1, 2


def tiny(seed: int = 0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    config = (
        dict(
            src_vocab_size=VOCAB,
            d_model=32,
            n_heads=4,
            d_ff=64,
            n_encoder_layers=2,
            n_decoder_layers=2,
            dropout=0.0,
            max_len=48,
        )
        | overrides
    )
    return Transformer(TransformerConfig(**config)).eval()


def sources(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (batch, length), generator=g)


def sum_log_prob(model: Transformer, src: torch.Tensor, out: torch.Tensor) -> float:
    """log p(out | src) under teacher forcing, over the tokens before padding."""
    with torch.no_grad():
        tgt_in = torch.cat([torch.tensor([[BOS]]), out[None, :-1]], dim=1)
        logp = model(src[None], tgt_in).log_softmax(-1)[0]
    return float(logp.gather(1, out[:, None]).sum())


def trim(row: torch.Tensor) -> list[int]:
    tokens = row.tolist()
    while tokens and tokens[-1] == PAD:
        tokens.pop()
    return tokens


# --------------------------------------------------------------------------------------------------------------
# The core loops on hand-made distributions


def scripted(table: dict[tuple[int, ...], dict[int, float]], vocab: int = 5):
    """next_logits from a table: prefix -> {token: probability}; unlisted prefixes put all mass on EOS."""

    def next_logits(generated: torch.Tensor) -> torch.Tensor:
        rows = []
        for prefix in generated.tolist():
            probs = torch.full((vocab,), 1e-9)
            for token, p in table.get(tuple(prefix), {EOS: 1.0}).items():
                probs[token] = p
            rows.append(probs.log())
        return torch.stack(rows)

    return next_logits


# Greedy takes 3, 3, EOS (p 0.24); the path 4, EOS has probability 0.4 * 0.9 = 0.36.
GARDEN_PATH = {(): {3: 0.6, 4: 0.4}, (3,): {3: 0.4, EOS: 0.3, 4: 0.3}, (4,): {EOS: 0.9, 3: 0.1}}


def test_beam_search_finds_the_better_hypothesis_greedy_misses():
    step = scripted(GARDEN_PATH)
    greedy = decode_tokens(step, 3, batch_size=1, device="cpu", eos_token_id=EOS, temperature=0)
    assert greedy.tolist() == [[3, 3, EOS]]
    beam = beam_search(step, 3, batch_size=1, beam_size=2, eos_token_id=EOS, pad_token_id=PAD, device="cpu")
    assert beam.tolist() == [[4, EOS]]
    one = beam_search(step, 3, batch_size=1, beam_size=1, eos_token_id=EOS, pad_token_id=PAD, device="cpu")
    assert one.tolist() == greedy.tolist()


def test_length_penalty_prefers_longer_hypotheses():
    """With alpha 0 the short hypothesis (p 0.4) wins; a strong length penalty favours a longer one (p 0.315)."""
    table = {(): {EOS: 0.4, 3: 0.35, 4: 0.25}, (3,): {5: 0.9, EOS: 0.1}, (4,): {5: 0.9, EOS: 0.1}}
    run = lambda alpha: beam_search(
        scripted(table, vocab=6),
        5,
        batch_size=1,
        beam_size=2,
        eos_token_id=EOS,  # noqa: E731
        pad_token_id=PAD,
        device="cpu",
        length_penalty=alpha,
    )
    assert run(0.0).tolist() == [[EOS]]
    assert run(2.0).tolist() == [[3, 5, EOS]]
    assert length_penalty_factor(3, 0.6) == pytest.approx((8 / 6) ** 0.6) and length_penalty_factor(7, 0.0) == 1


def test_beam_search_reorders_the_callers_state():
    """`reorder` receives, per step, the row each surviving beam continues; replaying it on the rows' histories
    reproduces the returned hypothesis."""
    history = torch.arange(4)[:, None]  # 2 inputs x beam 2: row i's own history starts as [i]

    def reorder(index):
        nonlocal history
        history = history.index_select(0, index)

    out = beam_search(
        scripted(GARDEN_PATH),
        3,
        batch_size=2,
        beam_size=2,
        eos_token_id=EOS,
        pad_token_id=PAD,
        device="cpu",
        reorder=reorder,
    )
    assert out.tolist() == [[4, EOS], [4, EOS]]
    assert set(history[:2, 0].tolist()) <= {0, 1} and set(history[2:, 0].tolist()) <= {2, 3}  # never crosses inputs


def test_beam_search_rejects_bad_arguments():
    with pytest.raises(ValueError, match="beam_size must be >= 1"):
        beam_search(scripted({}), 3, batch_size=1, beam_size=0, eos_token_id=EOS, pad_token_id=PAD, device="cpu")
    with pytest.raises(ValueError, match="length_penalty must be >= 0"):
        beam_search(
            scripted({}),
            3,
            batch_size=1,
            beam_size=2,
            eos_token_id=EOS,
            pad_token_id=PAD,
            device="cpu",
            length_penalty=-1,
        )


# --------------------------------------------------------------------------------------------------------------
# Transformer translation


def eos_from_greedy(model: Transformer, src: torch.Tensor, at: int = 3) -> int:
    """Re-label the token greedy decoding produces at step `at` as EOS, so that decoding visibly stops; returns
    the number of tokens greedy decoding of src[0] then produces (up to the first occurrence, EOS included)."""
    free = model.generate(src[:1], max_new_tokens=at + 1)[0].tolist()
    model.config.eos_token_id = free[at]
    return free.index(free[at]) + 1


@pytest.mark.parametrize("use_cache", [True, False])
def test_beam_size_one_equals_greedy(use_cache):
    model = tiny()
    src = sources(3, 7)
    eos_from_greedy(model, src)
    greedy = model.generate(src, max_new_tokens=12, use_cache=use_cache)
    beam = model.generate(src, max_new_tokens=12, beam_size=1, use_cache=use_cache)
    assert torch.equal(greedy, beam)
    # The shared core's beam search with K=1 (rather than the greedy shortcut) gives the same tokens.
    memory = model.encode(src)

    def step(generated):
        tgt = torch.cat([torch.full((3, 1), BOS), generated], dim=1)
        return model.decode(tgt, memory)[:, -1]

    core = beam_search(
        step, 12, batch_size=3, beam_size=1, eos_token_id=model.config.eos_token_id, pad_token_id=PAD, device="cpu"
    )
    assert torch.equal(core, greedy[:, : core.shape[1]]) and not greedy[:, core.shape[1] :].any()


def test_greedy_follows_argmax_and_stops_at_eos():
    model = tiny()
    src = sources(1, 6)
    length = eos_from_greedy(model, src, at=4)
    out = model.generate(src, max_new_tokens=20)
    assert out.shape == (1, length) and int(out[0, -1]) == model.config.eos_token_id
    with torch.no_grad():
        for i in range(length):
            tgt = torch.cat([torch.tensor([[BOS]]), out[:, :i]], dim=1)
            assert int(model(src, tgt)[0, -1].argmax()) == int(out[0, i])


@pytest.mark.parametrize("beam_size", [1, 4])
def test_cached_and_uncached_decoding_are_identical(beam_size):
    model = tiny(seed=1)
    src = sources(3, 8, seed=2)
    mask = torch.tensor([[1] * 8, [1] * 5 + [0] * 3, [1] * 3 + [0] * 5])
    src = src.masked_fill(mask == 0, PAD)
    cached = model.generate(src, mask, max_new_tokens=15, beam_size=beam_size, use_cache=True)
    uncached = model.generate(src, mask, max_new_tokens=15, beam_size=beam_size, use_cache=False)
    assert torch.equal(cached, uncached)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_batch_equals_each_sentence_alone(beam_size):
    """Right-padded sources of different lengths in one batch decode exactly as each decoded alone."""
    model = tiny(seed=2)
    a, b, c = sources(1, 9, seed=5), sources(1, 4, seed=6), sources(1, 6, seed=7)
    eos_from_greedy(model, b, at=2)
    alone = [model.generate(s, max_new_tokens=14, beam_size=beam_size, length_penalty=0.6) for s in (a, b, c)]
    batch = torch.full((3, 9), PAD)
    mask = torch.zeros(3, 9, dtype=torch.long)
    for i, s in enumerate((a, b, c)):
        batch[i, : s.shape[1]], mask[i, : s.shape[1]] = s[0], 1
    out = model.generate(batch, mask, max_new_tokens=14, beam_size=beam_size, length_penalty=0.6)
    for i in range(3):
        assert trim(out[i]) == trim(alone[i][0])
    assert trim(out[1])[-1] == model.config.eos_token_id  # b ends early, padded after its EOS
    assert out[1, len(trim(out[1])) :].eq(PAD).all()


@pytest.mark.parametrize("beam_size", [1, 4])
def test_max_length_is_respected(beam_size):
    model = tiny()
    out = model.generate(sources(2, 5), max_new_tokens=6, beam_size=beam_size)
    assert out.shape[1] <= 6
    default = model.generate(sources(2, 5), beam_size=beam_size)  # default limit: source length + 50, capped
    assert default.shape[1] <= 48
    with pytest.raises(ValueError, match="max_new_tokens must be in"):
        model.generate(sources(1, 5), max_new_tokens=49)
    with pytest.raises(ValueError, match="49 tokens but the model's max_len is 48"):
        model.generate(sources(1, 49))


def test_beam_search_scores_at_least_as_well_as_greedy_here():
    """A beam of 5 finds, for these sources, a translation at least as likely as greedy's (alpha 0)."""
    model = tiny(seed=3)
    src = sources(4, 6, seed=9)
    eos_from_greedy(model, src)
    greedy = model.generate(src, max_new_tokens=10)
    beam = model.generate(src, max_new_tokens=10, beam_size=5)
    for i in range(4):
        g, b = torch.tensor(trim(greedy[i])), torch.tensor(trim(beam[i]))
        if g[-1] == model.config.eos_token_id and b[-1] == model.config.eos_token_id:
            assert sum_log_prob(model, src[i], b) >= sum_log_prob(model, src[i], g) - 1e-4
    assert math.isfinite(sum_log_prob(model, src[0], torch.tensor(trim(beam[0]))))


def test_generate_restores_training_mode():
    model = tiny(dropout=0.2).train()
    model.generate(sources(1, 4), max_new_tokens=3)
    assert model.training


@pytest.mark.parametrize("kind", ["gpt", "transformer"])
def test_generate_restores_training_mode_when_decoding_raises(kind, monkeypatch):
    """generate() switches to eval mode; a failure halfway (here: the decoder loop raising) hands the model back in
    the mode it came in, never silently in eval mode (which would turn off dropout in the training that follows)."""
    from zoo.models import GPT, GPTConfig
    from zoo.models import gpt as gpt_module
    from zoo.models import transformer as transformer_module

    def broken(*args, **kwargs):
        raise RuntimeError("decoding failed")

    if kind == "gpt":
        model = GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=8)).train()
        monkeypatch.setattr(gpt_module, "decode_tokens", broken)
        call = lambda: model.generate(torch.zeros(1, 2, dtype=torch.long), max_new_tokens=3)  # noqa: E731
    else:
        model = tiny().train()
        monkeypatch.setattr(transformer_module, "decode_tokens", broken)
        call = lambda: model.generate(torch.full((1, 4), 5), max_new_tokens=3)  # noqa: E731
    with pytest.raises(RuntimeError, match="decoding failed"):
        call()
    assert model.training and all(m.training for m in model.modules())
