"""`lab/params`: the number of trainable parameters of a job's network, so that a question comparing two models
(a ViT and a CNN) can show in its table that they are matched, from the models themselves rather than a note."""

from __future__ import annotations

from .record import Recorder


class ParameterCountProbe(Recorder):
    """At the start of fit: the unique trainable parameters of the task's network (a shared tensor counts once)."""

    def on_fit_start(self, trainer, pl_module) -> None:
        net = getattr(pl_module, "net", pl_module)
        unique = {id(p): p.numel() for p in net.parameters() if p.requires_grad}
        self.metrics = {"lab/params": float(sum(unique.values()))}
