"""The names optimizers and schedules had before they moved out of zoo.tasks, and the names they have now.

Checkpoints written before the move record their optimizer and scheduler partials under the old modules
(`{"_target_": "zoo.tasks.optim.warmup_cosine", ...}`, see zoo.tasks.factories). Those checkpoints are users' data:
they must still load with their optimizer and schedule (zoo.tasks.factories.rebuild_partial) and still resume
under a config that names the new module (zoo.checkpointing.reading.check_resume). The table is explicit, one
entry per name that could be recorded, not a prefix rewrite: a recorded name is imported, so only names known to
have moved are translated.
"""

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
