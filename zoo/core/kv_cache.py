"""Key/value cache for incremental decoding.

Self-attention keys and values grow by the new positions at every step; cross-attention keys and values are
computed once from the encoder output and reused. Buffers grow by doubling, so appending one position is an
in-place copy rather than a concatenation of the whole history.
"""

from __future__ import annotations

import torch


class LayerCache:
    """The cached keys/values of one layer, shaped (batch, heads, positions, head_dim)."""

    def __init__(self) -> None:
        self._k: torch.Tensor | None = None
        self._v: torch.Tensor | None = None
        self.length = 0
        self.cross_k: torch.Tensor | None = None
        self.cross_v: torch.Tensor | None = None

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store this step's keys/values and return all keys/values so far (views, no copy of the history)."""
        new = k.shape[2]
        needed = self.length + new
        if self._k is None or needed > self._k.shape[2] or self._k.shape[0] != k.shape[0]:
            capacity = max(needed, 64) if self._k is None else max(needed, 2 * self._k.shape[2])
            shape = (k.shape[0], k.shape[1], capacity, k.shape[3])
            grown_k = k.new_empty(shape)
            grown_v = v.new_empty(shape)
            if self._k is not None and self.length:
                grown_k[:, :, : self.length] = self._k[:, :, : self.length]
                grown_v[:, :, : self.length] = self._v[:, :, : self.length]
            self._k, self._v = grown_k, grown_v
        self._k[:, :, self.length : needed] = k
        self._v[:, :, self.length : needed] = v
        self.length = needed
        return self._k[:, :, :needed], self._v[:, :, :needed]

    def reorder(self, index: torch.Tensor) -> None:
        """Select/reorder batch rows (beam search keeps the histories of the surviving beams)."""
        if self._k is not None:
            self._k = self._k.index_select(0, index)
            self._v = self._v.index_select(0, index)
        if self.cross_k is not None:
            self.cross_k = self.cross_k.index_select(0, index)
            self.cross_v = self.cross_v.index_select(0, index)


class KVCache:
    """One `LayerCache` per layer; `length` is the number of positions already decoded."""

    def __init__(self, n_layers: int) -> None:
        self.layers = [LayerCache() for _ in range(n_layers)]

    @property
    def length(self) -> int:
        return self.layers[0].length

    def reorder(self, index: torch.Tensor) -> None:
        for layer in self.layers:
            layer.reorder(index)
