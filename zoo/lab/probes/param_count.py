"""`lab/params`: the number of trainable parameters of a job's network, so that a question comparing two models
(a ViT and a CNN) can show in its table that they are matched, from the models themselves rather than a note."""

from __future__ import annotations

import lightning as L


class ParameterCountProbe(L.Callback):
    """At the start of fit: the unique trainable parameters of the task's network (a shared tensor counts once)."""

    def __init__(self) -> None:
        self.metrics: dict[str, float] = {}

    def on_fit_start(self, trainer, pl_module) -> None:
        net = getattr(pl_module, "net", pl_module)
        unique = {id(p): p.numel() for p in net.parameters() if p.requires_grad}
        self.metrics = {"lab/params": float(sum(unique.values()))}

    def result_record(self) -> dict:
        return {"metrics": dict(self.metrics)}
