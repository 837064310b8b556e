"""Saving and restoring the random number generators with every checkpoint.

Lightning checkpoints hold weights, optimizer, schedule and loop progress but not the RNGs, so dropout after a
resume would draw different masks than the uninterrupted run. This callback puts them in the checkpoint.
"""

from __future__ import annotations

import random

import torch
from lightning.pytorch import Callback


class RNGStateCheckpoint(Callback):
    def state_dict(self) -> dict:
        state = {"torch": torch.get_rng_state(), "python": list(random.getstate()[1])}
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["cuda"] = torch.cuda.get_rng_state_all()
        return state

    def load_state_dict(self, state: dict) -> None:
        torch.set_rng_state(state["torch"])
        version, _, gauss = random.getstate()
        random.setstate((version, tuple(state["python"]), gauss))
        if "cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])
