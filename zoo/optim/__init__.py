"""Optimizers, parameter groups and learning-rate schedules: what a task's `configure_optimizers` builds from the
config's partials. Muon for the block matrices with AdamW for the rest (`muon`), weight-decay and layer-decay groups
(`param_groups`), completing an optimizer partial (`build`), the warm-up schedules (`schedules`) and the paper's
inverse-square-root schedule (`inverse_sqrt`). Configs name them by module (`zoo.optim.schedules.warmup_cosine`);
checkpoints record the same names (zoo.tasks.factories), and `former_names` translates the names that checkpoints
written before this package existed recorded (zoo.tasks.optim, zoo.tasks.schedules, zoo.tasks.muon). The functions
of `param_groups` are not re-exported here: the function `param_groups` would hide its module of the same name."""

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
