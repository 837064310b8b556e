"""The names optimizers and schedules had in checkpoints written before they moved out of zoo.tasks, and their
names now: those checkpoints still load and resume. One entry per name, not a prefix rewrite: a recorded name is
imported, so only names known to have moved are translated."""

from __future__ import annotations

FORMER_NAMES = {
    "zoo.tasks.optim.warmup_cosine": "zoo.optim.schedules.warmup_cosine",
    "zoo.tasks.optim.warmup_stable_decay": "zoo.optim.schedules.warmup_stable_decay",
    "zoo.tasks.schedules.warmup_inverse_sqrt": "zoo.optim.inverse_sqrt.warmup_inverse_sqrt",
    "zoo.tasks.muon.MuonWithAdamW": "zoo.optim.muon.MuonWithAdamW",
    "zoo.tasks.muon.BatchedMuon": "zoo.optim.muon.BatchedMuon",
}


def current_name(target: str) -> str:
    """The name `target` has today: its entry in FORMER_NAMES, else itself."""
    return FORMER_NAMES.get(target, target)
