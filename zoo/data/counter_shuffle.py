"""A shuffle of any number of samples in constant memory (ResumableShuffle's list of an epoch's order costs tens of
bytes per sample, per token for windows at every offset): the order is a keyed permutation of [0, n), a balanced
Feistel network over the smallest power of four >= n, walking the cycle until the value falls inside [0, n).
"""

from __future__ import annotations

from collections.abc import Iterator

from .resumable import ResumableShuffle

_MASK64 = (1 << 64) - 1


def _mix(x: int) -> int:
    """splitmix64's finaliser: a well-spread 64-bit function of a 64-bit integer."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


class KeyedPermutation:
    """A permutation of range(n) chosen by `key`; `p[i]` for any i in O(1) expected time and memory."""

    ROUNDS = 6

    def __init__(self, n: int, key: int) -> None:
        self.n = n
        half_bits = max(1, ((n - 1).bit_length() + 1) // 2)
        self.half_bits, self.half_mask = half_bits, (1 << half_bits) - 1
        self.round_keys = [_mix((key & _MASK64) ^ _mix(r)) for r in range(self.ROUNDS)]

    def _feistel(self, x: int) -> int:
        left, right = x >> self.half_bits, x & self.half_mask
        for round_key in self.round_keys:
            left, right = right, left ^ (_mix(right ^ round_key) & self.half_mask)
        return (left << self.half_bits) | right

    def __getitem__(self, i: int) -> int:
        x = self._feistel(i)
        while x >= self.n:  # the domain is at most 4n: a few steps on average
            x = self._feistel(x)
        return x


class CounterShuffle(ResumableShuffle):
    """ResumableShuffle, with the order computed per index instead of materialised."""

    def __iter__(self) -> Iterator[int]:
        epoch, start = self.epoch, self.start
        self.epoch, self.start = epoch + 1, 0  # as ResumableShuffle: the skip applies to the first pass only
        order = KeyedPermutation(len(self.dataset), self.seed * 1_000_003 + epoch)
        positions = range(self.rank, self.total_size, self.num_replicas)[start:]
        return (order[p] for p in positions)
