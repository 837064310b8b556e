"""Muon for the hidden matrices, AdamW for the rest (Jordan et al. 2024; the modded-nanogpt speedrun).

Muon orthogonalizes the momentum of a 2-D weight (Newton-Schulz), which suits the matrices inside the transformer
blocks; embeddings, the output head, norms and biases keep AdamW. `MuonWithAdamW` is one torch Optimizer over a
`torch.optim.Muon` and a `torch.optim.AdamW`, so Lightning, LambdaLR schedulers, LearningRateMonitor, gradient
clipping and checkpoints see an ordinary optimizer. In YAML:

    model:
      optimizer:
        _target_: zoo.tasks.muon.MuonWithAdamW
        _partial_: true
        lr: 2.0e-3
        betas: [0.9, 0.95]
        muon_momentum: 0.95
        adjust_lr_fn: match_rms_adamw
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from zoo.core import Block

ADJUST_LR_FNS = ("match_rms_adamw", "original", "spectral_unclamped")


def block_matrices(model: nn.Module) -> set[int]:
    """ids of the weights of the linear layers inside the model's transformer blocks (attention and feed-forward)."""
    return {
        id(layer.weight)
        for block in model.modules()
        if isinstance(block, Block)
        for layer in block.modules()
        if isinstance(layer, nn.Linear)
    }


class MuonWithAdamW(torch.optim.Optimizer):
    """Muon over the block matrices of `model`, AdamW over every other parameter.

    `params` are the task's parameter groups (or plain tensors); each group is split by identity into a Muon
    part and an AdamW part that keep its options (weight_decay, lr_scale, ...), and `param_groups` is the list
    of the inner optimizers' own group dicts, so whatever scales group["lr"] (a scheduler, lr_scale) reaches
    both. lr is AdamW's and, unless `muon_lr` is given, Muon's too: with adjust_lr_fn "match_rms_adamw" Muon's
    update has AdamW's RMS, so one lr serves both; "original" (Keller Jordan's max(1, rows/cols)^0.5) wants a
    larger muon_lr (~0.02). `model` is the network, passed by `build_optimizer`.
    """

    def __init__(
        self,
        params: Iterable,
        *,
        model: nn.Module | None = None,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.95),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        fused: bool | None = None,
        foreach: bool | None = None,
        muon_lr: float | None = None,
        muon_momentum: float = 0.95,
        nesterov: bool = True,
        ns_steps: int = 5,
        ns_coefficients: tuple[float, float, float] = (3.4445, -4.775, 2.0315),
        adjust_lr_fn: str = "match_rms_adamw",
    ) -> None:
        if model is None:
            raise ValueError("MuonWithAdamW needs model=<the network> to tell its block matrices from the rest")
        if adjust_lr_fn not in ADJUST_LR_FNS:
            raise ValueError(
                f"model.optimizer.adjust_lr_fn must be one of {', '.join(ADJUST_LR_FNS)}, got {adjust_lr_fn!r}"
            )
        if muon_lr is not None and not muon_lr > 0:
            raise ValueError(f"model.optimizer.muon_lr must be positive (or null: lr), got {muon_lr!r}")
        if not 0.0 <= muon_momentum < 1.0:
            raise ValueError(f"model.optimizer.muon_momentum must be in [0, 1), got {muon_momentum!r}")
        if isinstance(ns_steps, bool) or not isinstance(ns_steps, int) or not 0 < ns_steps < 100:
            raise ValueError(f"model.optimizer.ns_steps must be an integer in [1, 99], got {ns_steps!r}")
        self._model_name = type(model).__name__
        self._block_ids = block_matrices(model)
        self._muon_options = dict(
            lr=lr if muon_lr is None else muon_lr,
            weight_decay=weight_decay,
            momentum=muon_momentum,
            nesterov=nesterov,
            ns_steps=ns_steps,
            ns_coefficients=tuple(ns_coefficients),
            adjust_lr_fn=adjust_lr_fn,
        )
        self._adamw_options = dict(
            lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, fused=fused, foreach=foreach
        )
        self.muon: torch.optim.Muon | None = None
        self.adamw: torch.optim.AdamW | None = None
        # No "betas" here: LearningRateMonitor(log_momentum=True) would then look for them in Muon's groups too.
        defaults = dict(lr=lr, muon_lr=muon_lr, weight_decay=weight_decay, adjust_lr_fn=adjust_lr_fn)
        super().__init__(params, defaults)  # calls add_param_group for each group
        if self.muon is None:
            raise ValueError(
                f"MuonWithAdamW found no block matrices (nn.Linear weights inside zoo.core.Block) among the "
                f"parameters of {self._model_name}; use torch.optim.AdamW for it"
            )

    def _inner(self) -> list[torch.optim.Optimizer]:
        return [opt for opt in (self.muon, self.adamw) if opt is not None]

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        params = param_group["params"]
        params = [params] if isinstance(params, torch.Tensor) else list(params)
        options = {k: v for k, v in param_group.items() if k != "params"}
        muon_part = [p for p in params if id(p) in self._block_ids]
        adamw_part = [p for p in params if id(p) not in self._block_ids]
        for name, part, cls, defaults in (
            ("muon", muon_part, torch.optim.Muon, self._muon_options),
            ("adamw", adamw_part, torch.optim.AdamW, self._adamw_options),
        ):
            if not part:
                continue
            group = {**options, "params": part}
            inner = getattr(self, name)
            if inner is None:  # torch optimizers refuse to start empty, so each is made with its first group
                setattr(self, name, cls([group], **defaults))
            else:
                inner.add_param_group(group)
        self.param_groups = [group for opt in self._inner() for group in opt.param_groups]

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for opt in self._inner():
            opt.step()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self._inner():
            opt.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return {
            "muon": self.muon.state_dict(),
            "adamw": None if self.adamw is None else self.adamw.state_dict(),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if set(state_dict) != {"muon", "adamw"} or (state_dict["adamw"] is None) != (self.adamw is None):
            raise ValueError(
                f"not a state of this MuonWithAdamW (keys {sorted(state_dict)}); was the run optimized otherwise?"
            )
        self.muon.load_state_dict(state_dict["muon"])
        if self.adamw is not None:
            self.adamw.load_state_dict(state_dict["adamw"])
        # Loading replaces the inner group dicts; ours must be those very dicts again.
        self.param_groups = [group for opt in self._inner() for group in opt.param_groups]
