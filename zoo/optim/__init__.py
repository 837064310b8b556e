"""Optimizers (Muon with AdamW), parameter groups and learning-rate schedules: what a task's `configure_optimizers`
builds from the config's partials. `param_groups`' functions are not re-exported: the function would hide its module."""

from .build import build_optimizer, check_betas
from .inverse_sqrt import paper_peak_lr, warmup_inverse_sqrt
from .muon import BatchedMuon, MuonWithAdamW
from .schedules import restarted_schedule, warmup_cosine, warmup_stable_decay

__all__ = [
    "BatchedMuon",
    "MuonWithAdamW",
    "build_optimizer",
    "check_betas",
    "paper_peak_lr",
    "restarted_schedule",
    "warmup_cosine",
    "warmup_inverse_sqrt",
    "warmup_stable_decay",
]
