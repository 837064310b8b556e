"""A character tagging rule whose labels need the context to the right: how does this letter's word end?

A *word* is a run of letters. Every letter is tagged by the first character after its word: **0** when that is
whitespace, **1** when it is anything else. Non-letters, and a word that runs to the end of the text, carry no tag
(IGNORE). The label is decided up to a word's length to the right, so a causal model must guess it while a
bidirectional one can look it up (the lab's `direction` question). The rule runs vectorised over token ids of a
character tokenizer, with a table `kinds` giving each id's kind.
"""

from __future__ import annotations

import numpy as np

LETTER, SPACE, OTHER = 0, 1, 2
IGNORE = -100  # torch's cross_entropy ignore_index: positions without a tag
TAG_NAMES = ("word ends at whitespace", "word ends at punctuation")


def char_kinds(chars: str) -> np.ndarray:
    """The kind of every id of a character vocabulary (`chars[i]` is the character of id i)."""
    return np.array([LETTER if c.isalpha() else SPACE if c.isspace() else OTHER for c in chars], dtype=np.int8)


def word_end_tags(ids: np.ndarray, kinds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(tags, reach) of every position of `ids`: the tag of the rule above (IGNORE where there is none), and how
    far to the right the character that decides it lies (0 where there is no tag). A window of text can tag
    position p only when p + reach[p] lies inside it."""
    kind = kinds[np.asarray(ids, dtype=np.int64)]
    n = len(kind)
    positions = np.arange(n, dtype=np.int64)
    letter = kind == LETTER
    # The first non-letter at or after each position (n where the text ends first): a suffix minimum.
    stops = np.minimum.accumulate(np.where(letter, n, positions)[::-1])[::-1]
    tagged = letter & (stops < n)
    tags = np.full(n, IGNORE, dtype=np.int64)
    tags[tagged] = np.where(kind[stops[tagged]] == SPACE, 0, 1)
    reach = np.where(tagged, stops - positions, 0)
    return tags, reach


def tags_in_window(tags: np.ndarray, reach: np.ndarray) -> np.ndarray:
    """The tags of one window (its slices of `tags` and `reach`): a tag whose deciding character lies beyond the
    window's end becomes IGNORE, since no model reading the window can know it."""
    inside = reach < len(tags) - np.arange(len(tags))
    return np.where(inside, tags, IGNORE)
