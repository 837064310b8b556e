"""ActivationCostProbe: is ReLU cheaper than GELU? After training, on the shape the first FFN saw, forward and
backward of each activation alone (`lab/act_ms/<activation>`) and of the whole FFN with it (`lab/ffn_ms/<activation>`),
all arms interleaved in one process (zoo/lab/measure/timing.py), and the ratios `lab/act_ms/gelu_over_relu` and
`lab/ffn_ms/gelu_over_relu` (> 1: GELU is the dearer)."""

from __future__ import annotations

import copy

import torch

from zoo.core.feedforward import ACTIVATIONS, FeedForward

from ..probes.record import Recorder
from . import timing


class ActivationCostProbe(Recorder):
    def __init__(
        self,
        activations: tuple[str, ...] = ("relu", "gelu"),
        rounds: int = 9,
        act_calls: int = 100,
        ffn_calls: int = 10,
    ) -> None:
        unknown = [a for a in activations if a not in ACTIVATIONS]
        if unknown or len(activations) < 2:
            raise ValueError(f"activations must be 2+ of {', '.join(ACTIVATIONS)}, got {list(activations)}")
        if min(rounds, act_calls, ffn_calls) < 1:
            raise ValueError(f"rounds ({rounds}), act_calls ({act_calls}) and ffn_calls ({ffn_calls}) must be >= 1")
        super().__init__()
        self.activations, self.rounds, self.calls = tuple(activations), rounds, {"act": act_calls, "ffn": ffn_calls}
        self._ffn: FeedForward | None = None
        self._shape: torch.Size | None = None
        self._hook = None

    def on_train_start(self, trainer, pl_module) -> None:
        self._ffn = next((m for m in pl_module.modules() if isinstance(m, FeedForward)), None)
        if self._ffn is not None:
            self._hook = self._ffn.register_forward_hook(self._capture)

    def _capture(self, module, args, output) -> None:
        self._shape = args[0].shape
        self._hook.remove()

    def on_train_end(self, trainer, pl_module) -> None:
        if self._shape is None:
            return
        self.record(trainer, time_activations(self._ffn, self._shape, self.activations, self.rounds, self.calls))


def time_activations(
    ffn: FeedForward, shape: torch.Size, activations: tuple[str, ...], rounds: int = 9, calls: dict | None = None
) -> dict[str, float]:
    """Forward + backward of each activation alone and of `ffn` with it, on an input of `shape`, interleaved.
    calls: {"act": n, "ffn": n}, the passes per timed call of each part (the nonlinearity alone is ~20x quicker)."""
    calls = calls or {"act": 100, "ffn": 10}
    device = next(ffn.parameters()).device
    x = torch.randn(shape, device=device, requires_grad=True)
    hidden = torch.randn(*shape[:-1], ffn.fc1.out_features, device=device, requires_grad=True)
    arms = {}
    for name in activations:
        twin = copy.deepcopy(ffn).train()  # the trained weights; only the nonlinearity differs between the twins
        twin.act = ACTIVATIONS[name]().to(device)
        arms[f"act/{name}"] = _forward_backward(twin.act, hidden, calls["act"])
        arms[f"ffn/{name}"] = _forward_backward(twin, x, calls["ffn"])
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else None
    found = timing.interleave(arms, rounds=rounds, sync=sync)
    metrics = {}
    for part in ("act", "ffn"):
        for name in activations:
            # ms per call: the arm ran `calls` passes per timing
            metrics.update(found[f"{part}/{name}"].metrics(f"lab/{part}_ms/{name}", scale=1000.0 / calls[part]))
        if "relu" in activations and "gelu" in activations:
            ratio = timing.ratio(f"lab/{part}_ms/gelu_over_relu", found[f"{part}/gelu"], found[f"{part}/relu"])
            metrics.update(ratio)
    return metrics


def _forward_backward(module: torch.nn.Module, x: torch.Tensor, calls: int):
    def run() -> None:
        for _ in range(calls):
            module(x).sum().backward()
            x.grad = None
            module.zero_grad(set_to_none=True)

    return run
