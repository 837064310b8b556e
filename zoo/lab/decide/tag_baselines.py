"""Count taggers that read only the left context: what a tagging arm must beat, and how far left context goes. The
majority class tags every character with the commonest training tag; the count tagger of order k with the tag seen
most often after the same k characters (backing off to shorter contexts, then to the majority). Scored on exactly the
tagged characters `val/acc` covers, a character's context never reaching before its window's start."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from zoo.data.char_tags import IGNORE, tags_in_window

from .baselines import ngram_codes


@dataclass(frozen=True)
class TaggedPositions:
    """The scored characters: their indices, how many characters of their window precede them (1 for a window's
    first), and their tags."""

    index: np.ndarray
    history: np.ndarray
    tags: np.ndarray


def window_positions(tags: np.ndarray, reach: np.ndarray, starts: np.ndarray, block_size: int) -> TaggedPositions:
    """The tagged characters of the windows starting at `starts`, each tag as the window shows it."""
    offsets = np.arange(block_size, dtype=np.int64)
    index = (np.asarray(starts, dtype=np.int64)[:, None] + offsets[None, :]).ravel()
    shown = np.concatenate([tags_in_window(tags[s : s + block_size], reach[s : s + block_size]) for s in starts])
    keep = shown != IGNORE
    history = np.broadcast_to(offsets + 1, (len(starts), block_size)).ravel()
    return TaggedPositions(index[keep], history[keep], shown[keep])


@dataclass(frozen=True)
class TaggerAccuracies:
    majority: float  # always the commonest training tag
    by_order: dict[int, float]  # order k -> accuracy of the count tagger over the last k characters
    scored: int  # how many tagged characters were scored


def _context_codes(tokens: np.ndarray, index: np.ndarray, order: int, vocab_size: int) -> np.ndarray:
    """The code of the `order` characters ending at each index (-1 where the text starts later)."""
    codes = ngram_codes(tokens, order, vocab_size)
    first = index - (order - 1)
    return np.where(first >= 0, codes[np.maximum(first, 0)], -1)


def count_taggers(
    train_tokens: np.ndarray,
    train_tags: np.ndarray,
    val_tokens: np.ndarray,
    scored: TaggedPositions,
    vocab_size: int,
    orders: int,
) -> TaggerAccuracies:
    """Accuracies of the majority class and of the count taggers of orders 1..`orders`."""
    if orders < 1:
        raise ValueError(f"a count tagger reads at least 1 character, got orders={orders}")
    if len(scored.tags) == 0:
        raise ValueError("no tagged characters to score: the validation windows hold no tag")
    train_tokens, val_tokens = np.asarray(train_tokens, dtype=np.int64), np.asarray(val_tokens, dtype=np.int64)
    tagged = np.flatnonzero(train_tags != IGNORE)
    classes = int(train_tags[tagged].max()) + 1
    majority = int(np.bincount(train_tags[tagged], minlength=classes).argmax())
    predicted = np.full(len(scored.tags), majority)
    accuracies = {}
    for order in range(1, orders + 1):
        train_codes = _context_codes(train_tokens, tagged, order, vocab_size)
        usable = train_codes >= 0
        contexts, inverse = np.unique(train_codes[usable], return_inverse=True)
        counts = np.bincount(inverse * classes + train_tags[tagged][usable], minlength=len(contexts) * classes)
        best = counts.reshape(len(contexts), classes).argmax(axis=1)  # ties go to the lower tag
        val_codes = _context_codes(val_tokens, scored.index, order, vocab_size)
        slot = np.clip(np.searchsorted(contexts, val_codes), 0, max(len(contexts) - 1, 0))
        # Seen in training and inside the character's window: this order's answer replaces the shorter ones'.
        known = (len(contexts) > 0) & (contexts[slot] == val_codes) & (scored.history >= order)
        predicted = np.where(known, best[slot], predicted)
        accuracies[order] = float(np.mean(predicted == scored.tags))
    return TaggerAccuracies(float(np.mean(scored.tags == majority)), accuracies, len(scored.tags))
