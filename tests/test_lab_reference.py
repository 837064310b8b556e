"""The count n-gram models of zoo/lab/baselines.py (their losses on tiny shakespeare, the closed form of the unigram,
proper distributions, the windows the val loss covers) and metric names in words (zoo/lab/metric_names.py)."""

from __future__ import annotations

import numpy as np
import pytest

from zoo.data import LanguageModelDataModule
from zoo.data.windows import DisjointWindows
from zoo.lab import baselines
from zoo.lab.baselines import covered_windows, fit, log_probs, ngram_codes, score
from zoo.lab.metric_names import describe, header


@pytest.fixture(scope="module")
def shakespeare() -> tuple[np.ndarray, np.ndarray, int]:
    """tiny shakespeare's char train and val token arrays as the LM data module splits them (90/10 by position)."""
    data = LanguageModelDataModule(dataset="tinyshakespeare", tokenizer="char")
    data.build_splits()
    return np.asarray(data.tokens("train")), np.asarray(data.tokens("val")), data.vocab_size


# ---- the n-gram models -------------------------------------------------------------------------------------------


def test_tiny_shakespeare_ngram_losses_fall_with_the_order_and_match_the_reviewers(shakespeare):
    train, val, vocab = shakespeare
    result = baselines.baselines(train, val, vocab, orders=4)
    losses = [result.loss(n) for n in (1, 2, 3, 4)]
    assert all(a > b for a, b in zip(losses, losses[1:])), losses
    # the reviewers' numbers (absolute discounting): 3.35, 2.49, 2.06, 1.79; Kneser-Ney is a little lower above 2
    assert losses[0] == pytest.approx(3.35, abs=0.02)
    assert 2.40 < losses[1] < 2.52 and 1.98 < losses[2] < 2.10 and 1.65 < losses[3] < 1.82
    absolute = baselines.baselines(train, val, vocab, orders=4, method="absolute")
    assert absolute.loss(3) == pytest.approx(2.06, abs=0.02) and absolute.loss(4) == pytest.approx(1.79, abs=0.02)


def test_the_unigram_is_the_cross_entropy_of_val_under_the_train_frequencies(shakespeare):
    train, val, vocab = shakespeare
    frequencies = np.bincount(train, minlength=vocab) / len(train)
    predicted = np.bincount(val[1:], minlength=vocab) / (len(val) - 1)  # every val token after the first
    seen = predicted > 0
    closed_form = -float(np.sum(predicted[seen] * np.log(frequencies[seen])))
    assert score(fit(train, 1, vocab), val) == pytest.approx(closed_form, abs=1e-6)


def test_every_val_token_has_a_finite_loss_even_one_never_seen_in_training(shakespeare):
    train, val, vocab = shakespeare
    targets = np.arange(1, len(val))
    for order in (1, 2, 3, 4):
        assert np.isfinite(log_probs(fit(train, order, vocab), val, targets, targets)).all()
    # token 3 never occurs in training: the smoothed models still give it a probability
    small_train, small_val = np.array([0, 1, 2, 0, 1, 2, 0, 1, 1, 2]), np.array([0, 3, 1, 2, 3, 3])
    idx = np.arange(1, len(small_val))
    for order in (1, 2, 3, 4):
        for method in baselines.METHODS:
            assert np.isfinite(log_probs(fit(small_train, order, 4, method), small_val, idx, idx)).all()


@pytest.mark.parametrize("method", baselines.METHODS)
def test_each_order_is_a_probability_distribution_over_the_vocabulary(method):
    rng = np.random.default_rng(0)
    vocab = 6
    train = rng.choice(vocab, size=3000, p=[0.4, 0.2, 0.15, 0.1, 0.1, 0.05])
    for order in (1, 2, 3, 4):
        model = fit(train, order, vocab, method)
        for history in ([0, 1, 2], [5, 5, 5], [3, 0, 4], [1, 1]):  # seen and unseen contexts
            rows = np.array([[*history, w] for w in range(vocab)])
            flat = rows.ravel()
            targets = np.arange(len(history), len(flat), len(history) + 1)
            total = np.exp(log_probs(model, flat, targets, np.full(vocab, len(history)))).sum()
            assert total == pytest.approx(1.0, abs=1e-9), (order, history, total)


def test_ngram_codes_read_the_tokens_in_base_vocab():
    assert ngram_codes(np.array([1, 2, 3, 0]), 3, 10).tolist() == [123, 230]
    with pytest.raises(ValueError, match="63 bits"):
        ngram_codes(np.array([1, 2]), 5, 2**16)


def test_the_windows_are_those_the_val_loss_covers(shakespeare):
    _, val, _ = shakespeare
    dataset = DisjointWindows(val, 64, seed=0)  # what LanguageModelDataModule.eval_dataset("val") serves
    windows = covered_windows(dataset, batch_size=12, limit_val_batches=20)
    assert len(windows.starts) == 240 and "240 validation windows of 64 tokens" in windows.description
    targets, history = windows.targets()
    expected = np.concatenate([dataset[i][1].numpy() for i in range(240)])
    assert (val[targets] == expected).all() and history[:3].tolist() == [1, 2, 3] and history.max() == 64
    assert len(covered_windows(dataset, 12, 1.0).starts) == len(dataset)  # a fraction: Lightning's rule
    assert len(covered_windows(dataset, 12, 0.5).starts) == (len(dataset) // 12 + 1) // 2 * 12


# ---- metric names in words ---------------------------------------------------------------------------------------


def test_metric_names_in_words_with_the_raw_key_once():
    assert describe("probe/attn/logit_var/mean@init") == "variance of the attention logits at init (mean over layers)"
    assert describe("probe/grad_group/attn.q@init") == "gradient norm of W_q at init"
    assert describe("lab/loss_beyond@4x").startswith("validation loss at 4x the training length")
    assert describe("some/unknown") == "some/unknown"
    lab = {"metric_names": {"val/loss": "val loss (nats per character)"}}
    assert header("val/loss", lab) == "val loss (nats per character) (`val/loss`)"
