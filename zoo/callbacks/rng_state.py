"""The random generators (torch CPU and CUDA, Python, numpy) saved with every checkpoint, which Lightning leaves
out, so that dropout after a resume draws the masks of the uninterrupted run. Stored as tensors and plain numbers:
the checkpoint still loads with weights_only=True.
"""

from __future__ import annotations

import random

import numpy as np
import torch
from lightning.pytorch import Callback


def _numpy_state() -> dict:
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    return {
        "kind": kind,
        "keys": torch.from_numpy(keys.astype(np.int64)),
        "pos": int(pos),
        "has_gauss": int(has_gauss),
        "gauss": float(gauss),
    }


def _set_numpy_state(state: dict) -> None:
    keys = state["keys"].numpy().astype(np.uint32)
    np.random.set_state((state["kind"], keys, state["pos"], state["has_gauss"], state["gauss"]))


class RNGStateCheckpoint(Callback):
    def state_dict(self) -> dict:
        state = {"torch": torch.get_rng_state(), "python": list(random.getstate()[1]), "numpy": _numpy_state()}
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["cuda"] = torch.cuda.get_rng_state_all()
        return state

    def load_state_dict(self, state: dict) -> None:
        torch.set_rng_state(state["torch"])
        version, _, gauss = random.getstate()
        random.setstate((version, tuple(state["python"]), gauss))
        if "numpy" in state:  # absent in checkpoints of earlier versions
            _set_numpy_state(state["numpy"])
        if "cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])
