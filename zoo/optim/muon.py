"""Muon for the hidden matrices, AdamW for the rest (Jordan et al. 2024; the modded-nanogpt speedrun).

`MuonWithAdamW` is one torch Optimizer over a Muon (zoo's `BatchedMuon` by default, `muon_impl: torch` for
`torch.optim.Muon`) of the nn.Linear weights inside zoo.core.Block (or the `block_types` named) and a
`torch.optim.AdamW` of the rest, so Lightning, schedulers, clipping and checkpoints see an ordinary optimizer:

    model:
      optimizer:
        _target_: zoo.optim.muon.MuonWithAdamW
        _partial_: true
        lr: 2.0e-3
        muon_momentum: 0.95
        adjust_lr_fn: match_rms_adamw
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from hydra.utils import get_class
from torch import nn

from zoo.core import Block
from zoo.core.hardware import native_bf16

ADJUST_LR_FNS = ("match_rms_adamw", "original", "spectral_unclamped")
MUON_IMPLS = ("batched", "torch")


class BatchedMuon(torch.optim.Muon):
    """torch.optim.Muon's update (same options, same `momentum_buffer` state, so either resumes the other's
    checkpoint), with the Newton-Schulz iteration run once per shape for all matrices of that shape (a batched
    matmul) in `ns_dtype`: at the widths the CPU recipes train, torch's per-matrix bf16 matmuls cost more in call
    overhead than in arithmetic. ns_dtype "auto": bfloat16 where the device computes it natively
    (`zoo.core.hardware.native_bf16`), float32 elsewhere (an AVX2-only CPU emulates bf16, several times slower)."""

    def __init__(self, params, *, ns_dtype: str = "auto", **options) -> None:
        if ns_dtype not in ("auto", "float32", "bfloat16"):
            raise ValueError(f"model.optimizer.ns_dtype must be auto, float32 or bfloat16, got {ns_dtype!r}")
        super().__init__(params, **options)
        self.ns_dtype = ns_dtype
        self._auto_dtypes: dict[torch.device, torch.dtype] = {}

    def _dtype(self, device: torch.device) -> torch.dtype:
        if self.ns_dtype != "auto":
            return getattr(torch, self.ns_dtype)
        if device not in self._auto_dtypes:
            self._auto_dtypes[device] = torch.bfloat16 if native_bf16(device)[0] else torch.float32
        return self._auto_dtypes[device]

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            grads = [p.grad for p in params]  # 2-D: torch.optim.Muon's constructor refuses any other parameter
            buffers = []
            for p in params:
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                buffers.append(state["momentum_buffer"])
            momentum = group["momentum"]
            torch._foreach_lerp_(buffers, grads, 1 - momentum)
            updates = [g.lerp(b, momentum) for g, b in zip(grads, buffers)] if group["nesterov"] else buffers
            orthogonal = self._orthogonalize(updates, group)
            lr = float(group["lr"])
            if group["weight_decay"]:
                torch._foreach_mul_(params, 1 - lr * group["weight_decay"])
            for p, update in zip(params, orthogonal):
                p.add_(update, alpha=-_adjusted_lr(lr, group["adjust_lr_fn"], p.shape))
        return loss

    def _orthogonalize(self, updates: list[torch.Tensor], group: dict) -> list[torch.Tensor]:
        """Newton-Schulz of each update, stacked by (device, shape): wide matrices as they are, tall ones
        transposed (the iteration works on X X^T of the smaller side), as torch's does per matrix."""
        a, b, c = group["ns_coefficients"]
        out: list[torch.Tensor | None] = [None] * len(updates)
        by_shape: dict[tuple, list[int]] = {}
        for i, u in enumerate(updates):
            tall = u.shape[0] > u.shape[1]
            by_shape.setdefault((u.device, tuple(u.shape), tall), []).append(i)
        for (device, _, tall), indices in by_shape.items():
            x = torch.stack([updates[i] for i in indices]).to(self._dtype(device))
            x = x.mT if tall else x
            x = x / x.norm(dim=(1, 2), keepdim=True).clamp(min=group["eps"])
            for _ in range(group["ns_steps"]):
                gram = x @ x.mT
                x = torch.baddbmm(x, torch.baddbmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
            x = x.mT if tall else x
            for j, i in enumerate(indices):
                out[i] = x[j].to(updates[i].dtype)
        return out


def _adjusted_lr(lr: float, adjust_lr_fn: str | None, shape: torch.Size) -> float:
    """torch.optim.Muon's per-shape learning rate (torch.optim._muon._adjust_lr, private there)."""
    rows, cols = shape[:2]
    if adjust_lr_fn is None or adjust_lr_fn == "original":
        return lr * math.sqrt(max(1, rows / cols))
    if adjust_lr_fn == "match_rms_adamw":
        return lr * 0.2 * math.sqrt(max(rows, cols))
    if adjust_lr_fn == "spectral_unclamped":
        return lr * math.sqrt(rows / cols)
    return lr


def block_matrices(model: nn.Module, block_types: tuple[type, ...] = (Block,)) -> set[int]:
    """ids of the weights of the linear layers inside the model's transformer blocks (attention and feed-forward):
    the modules of `block_types` (zoo's Block by default)."""
    return {
        id(layer.weight)
        for block in model.modules()
        if isinstance(block, block_types)
        for layer in block.modules()
        if isinstance(layer, nn.Linear)
    }


def resolve_block_types(block_types: Sequence[type | str] | None) -> tuple[type, ...]:
    """The classes `block_types` names (classes, or dotted paths as YAML gives them); None: zoo's Block."""
    if block_types is None:
        return (Block,)
    if isinstance(block_types, (str, type)) or not block_types:
        raise ValueError(
            f"model.optimizer.block_types must be a non-empty list of block classes, got {block_types!r}; e.g. "
            "[timm.models.vision_transformer.Block]"
        )
    classes = []
    for entry in block_types:
        try:
            found = get_class(entry) if isinstance(entry, str) else entry
        except (ImportError, ValueError):
            found = None
        if not isinstance(found, type) or not issubclass(found, nn.Module):
            raise ValueError(
                f"model.optimizer.block_types: {entry!r} is not an importable nn.Module class; give its dotted path, "
                "e.g. timm.models.vision_transformer.Block"
            )
        classes.append(found)
    return tuple(classes)


class MuonWithAdamW(torch.optim.Optimizer):
    """Muon over the block matrices of `model` (passed by `build_optimizer`), AdamW over every other parameter.

    Each parameter group is split into a Muon and an AdamW part that keep its options, and `param_groups` are the
    inner optimizers' own group dicts, so whatever scales group["lr"] reaches both. lr is AdamW's and, unless
    `muon_lr` is given, Muon's: "match_rms_adamw" gives Muon's update AdamW's RMS; "original" wants muon_lr ~0.02."""

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
        muon_impl: str = "batched",
        ns_dtype: str = "auto",
        block_types: Sequence[type | str] | None = None,
    ) -> None:
        if model is None:
            raise ValueError("MuonWithAdamW needs model=<the network> to tell its block matrices from the rest")
        if adjust_lr_fn not in ADJUST_LR_FNS:
            raise ValueError(
                f"model.optimizer.adjust_lr_fn must be one of {', '.join(ADJUST_LR_FNS)}, got {adjust_lr_fn!r}"
            )
        if muon_impl not in MUON_IMPLS:
            raise ValueError(f"model.optimizer.muon_impl must be one of {', '.join(MUON_IMPLS)}, got {muon_impl!r}")
        if muon_impl == "torch" and ns_dtype != "auto":
            raise ValueError("model.optimizer.ns_dtype applies to muon_impl=batched (torch's Muon runs in bfloat16)")
        if muon_lr is not None and not muon_lr > 0:
            raise ValueError(f"model.optimizer.muon_lr must be positive (or null: lr), got {muon_lr!r}")
        if not 0.0 <= muon_momentum < 1.0:
            raise ValueError(f"model.optimizer.muon_momentum must be in [0, 1), got {muon_momentum!r}")
        if isinstance(ns_steps, bool) or not isinstance(ns_steps, int) or not 0 < ns_steps < 100:
            raise ValueError(f"model.optimizer.ns_steps must be an integer in [1, 99], got {ns_steps!r}")
        self._model_name = type(model).__name__
        self._block_types = resolve_block_types(block_types)
        self._block_ids = block_matrices(model, self._block_types)
        self._muon_options = dict(
            lr=lr if muon_lr is None else muon_lr,
            weight_decay=weight_decay,
            momentum=muon_momentum,
            nesterov=nesterov,
            ns_steps=ns_steps,
            ns_coefficients=tuple(ns_coefficients),
            adjust_lr_fn=adjust_lr_fn,
        )
        self._muon_class = torch.optim.Muon
        if muon_impl == "batched":
            self._muon_class = BatchedMuon
            self._muon_options["ns_dtype"] = ns_dtype
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
                f"MuonWithAdamW found no block matrices (nn.Linear weights inside "
                f"{', '.join(f'{t.__module__}.{t.__qualname__}' for t in self._block_types)}) among the parameters "
                f"of {self._model_name}; use torch.optim.AdamW for it, or name its block class in block_types"
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
            ("muon", muon_part, self._muon_class, self._muon_options),
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
