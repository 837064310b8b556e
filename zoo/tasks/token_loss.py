"""Token-count losses normalised by the target tokens of the whole optimizer step (all ranks, all micro-batches).

Averaging per micro-batch, as DDP (mean over ranks) and gradient accumulation (mean over micro-batches) do, weighs a
token of a short micro-batch more than one of a long one. The convention of fairseq and transformers is
sum(per-token losses) / N, N the target tokens of the whole optimizer step, known only after the window's last
micro-batch. So each micro-batch's loss is normalised by a reference count S every rank agrees on (the global token
count of the window's first micro-batch), and the accumulated gradient is corrected once after the last backward:

    returned loss   mean_local * n_local * W / S          (n_local: this micro-batch's tokens on this rank)
    accumulated     (1 / (W * A)) * sum over ranks and micro-batches of that = sum(token losses) / (A * S)
                    (DDP divides by the world size W, Lightning by accumulate_grad_batches A)
    corrected       * A * S / N                           = sum(token losses) / N

With one process and no accumulation the loss is the plain mean. With A == 1 the correction is 1, so terms that keep
a per-micro-batch mean (BERT's next-sentence loss) stay exact; with A > 1 they share the correction A * S / N."""

from __future__ import annotations

import torch


class TokenWindow:
    """The accumulation window's reference count and its tokens so far (on this rank)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.reference: torch.Tensor | None = None  # S: global tokens of the window's first micro-batch
        self.tokens: torch.Tensor | None = None  # this rank's tokens over the window so far

    def scale(self, mean: torch.Tensor, count, trainer) -> torch.Tensor:
        """The micro-batch's loss to return, from its mean per token and its (local) token count."""
        world, accumulate = trainer.world_size, trainer.accumulate_grad_batches
        if world == 1 and accumulate == 1:
            return mean
        count = torch.as_tensor(count, device=mean.device, dtype=torch.int64)
        if self.reference is None:
            # clamp: a first micro-batch without any target token anywhere still gives a usable scale.
            self.reference = trainer.strategy.reduce(count.clone(), reduce_op="sum").clamp(min=1)
            self.tokens = torch.zeros_like(count)
        self.tokens = self.tokens + count
        # A rank without target tokens contributes nothing (its mean, of no tokens, may be NaN).
        mean = torch.where(count > 0, mean, mean.new_zeros(()))
        return mean * (count * world / self.reference).to(mean.dtype)

    def correct(self, optimizer: torch.optim.Optimizer, trainer) -> None:
        """Rescale the accumulated gradients to sum(token losses) / N; a window without token losses is left be."""
        if self.reference is None:
            return
        total = trainer.strategy.reduce(self.tokens.clone(), reduce_op="sum").clamp(min=1)
        factor = (trainer.accumulate_grad_batches * self.reference / total).float()
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        for grad in grads:
            grad.mul_(factor.to(grad.dtype))
        self.reset()
