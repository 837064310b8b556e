"""ZooTask: what every task shares (network, optimizer partials, compile, the checkpoint's "zoo" section,
`load_from_checkpoint`, the batch sizes and FLOPs of the throughput monitor), so that each task keeps only its
losses, metrics and logging."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_warn

from zoo.checkpointing.reading import build_model, check_same_model, read_checkpoint
from zoo.checkpointing.weights_checksum import record_checksum, verify_checkpoint
from zoo.models import ZooModel
from zoo.optim.build import build_optimizer
from zoo.optim.param_groups import param_groups
from zoo.strategies.fsdp import check_optimizer_for_sharding, is_sharded, shard_per_block

from .factories import describe_partial, rebuild_partial
from .token_loss import TokenWindow


class ZooTask(L.LightningModule):
    """Base of the task LightningModules. Subclasses set `task_name` (stored in checkpoints; eval.py and
    generate.py dispatch on it), pass their own options as keyword arguments (recorded as hyper-parameters), and
    implement the loss/metric hooks and the throughput hooks below."""

    task_name: ClassVar[str]
    # Constructor arguments that are objects, not data: never recorded as hyper-parameters.
    not_hparams: ClassVar[tuple[str, ...]] = ("tokenizer",)
    # Hyper-parameters that say how the network was first made, not applied again once a checkpoint holds it.
    not_rebuilt: ClassVar[tuple[str, ...]] = ()
    # "tokens" or "images": what train/<unit>_per_sec counts.
    throughput_unit: ClassVar[str] = "tokens"
    _by_name: ClassVar[dict[str, type[ZooTask]]] = {}

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "task_name" in cls.__dict__:
            ZooTask._by_name[cls.task_name] = cls

    def __init__(
        self,
        net: ZooModel,
        optimizer: Callable[..., torch.optim.Optimizer] | None = None,
        scheduler: Callable[..., torch.optim.lr_scheduler.LRScheduler] | None = None,
        *,
        weight_decay: float = 0.0,
        compile: bool = False,
        tokenizer=None,
    ) -> None:
        """optimizer / scheduler: partials (Hydra `_partial_: true`) completed with the parameter groups / the
        optimizer; None builds a task for evaluation only. compile: `torch.compile` the network in place
        (`nn.Module.compile`), so compiled or not it has one set of parameter names and checkpoints carry no
        `_orig_mod.` prefixes."""
        super().__init__()
        # Lightning collects the arguments of every __init__ up the subclass chain (the tasks' own options).
        self.save_hyperparameters(ignore=["net", "optimizer", "scheduler", *self.not_hparams])
        # The partials as plain data ({"_target_", "_partial_", keywords}); None where they cannot be written down.
        self.hparams["optimizer"] = describe_partial(optimizer)
        self.hparams["scheduler"] = describe_partial(scheduler)
        self.net = net
        self.optimizer_factory, self.scheduler_factory = optimizer, scheduler
        self.tokenizer = tokenizer
        self.flops_per_batch: float | None = None  # of the training batch in flight; read by ThroughputMonitor
        self._token_window = TokenWindow()
        if compile:
            net.compile()

    # ---- sharding (trainer=fsdp: zoo.strategies.fsdp) ---------------------------------------------------------
    def configure_model(self) -> None:
        """Lightning's hook for sharding, called once the processes exist. Under FSDP2Strategy each of the task's
        modules (the network, a training-only head) is sharded per core Block: every parameter must belong to a
        sharded module, since nothing else synchronises gradients under this strategy."""
        if self.device_mesh is None:
            return
        options = getattr(self.trainer.strategy, "fsdp_options", None)
        if options is None:
            raise ValueError(
                f"{type(self.trainer.strategy).__name__} is not supported; for sharded training use trainer=fsdp "
                "(zoo.strategies.fsdp.FSDP2Strategy)"
            )
        for child in self.children():
            if any(True for _ in child.parameters()):
                shard_per_block(child, self.device_mesh, **options)

    # ---- optimization --------------------------------------------------------------------------------------
    def param_groups(self) -> list[dict]:
        """The optimizer's parameter groups: decay / no-decay by default. An override may give each group an
        `lr_scale` (multiplied into its lr before the scheduler records it), e.g. layer-wise lr decay."""
        return param_groups(self.net, self.hparams.weight_decay)

    def configure_optimizers(self):
        if self.optimizer_factory is None:
            raise ValueError(
                f"this {type(self).__name__} was built without an optimizer (evaluation only); give it "
                "optimizer=<partial>, or load it from a checkpoint that records one, to train"
            )
        if is_sharded(self.net):
            check_optimizer_for_sharding(self.optimizer_factory)
        optimizer = build_optimizer(self.optimizer_factory, self.param_groups(), self._trainer, model=self.net)
        for group in optimizer.param_groups:
            group["lr"] *= group.get("lr_scale", 1.0)
        if self.scheduler_factory is None:
            return optimizer
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": self.build_scheduler(optimizer), "interval": "step"},
        }

    def build_scheduler(self, optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler:
        """The per-step schedule from the scheduler partial; a task with training phases may chain several."""
        return self.scheduler_factory(optimizer)

    # ---- losses over target tokens (zoo.tasks.token_loss) ----------------------------------------------
    def token_loss(self, mean: torch.Tensor, count: int | torch.Tensor) -> torch.Tensor:
        """The training loss to return for a micro-batch whose loss is `mean` over `count` local target tokens, so
        that the step's gradient is that of the mean over all its target tokens (zoo.tasks.token_loss)."""
        if self._trainer is None:  # a step called by hand, outside fit
            return mean
        return self._token_window.scale(mean, count, self.trainer)

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure) -> None:
        # The correction follows the window's last backward directly: gradient-norm probes and clipping see it.
        def closure():
            result = optimizer_closure()
            self._token_window.correct(optimizer, self.trainer)
            return result

        return super().optimizer_step(epoch, batch_idx, optimizer, closure)

    # ---- throughput (read by ZooThroughputMonitor) -------------------------------------------------------
    # Each task defines batch_samples(batch) (sequences or images in a batch) and batch_items(batch) (what
    # train/<throughput_unit>_per_sec counts: real tokens, or images).
    def batch_flops(self, batch) -> float | None:
        """Training FLOPs (forward + backward) of a batch as the model computes it (padding included); None
        where the model has no estimate (then no MFU is logged)."""
        return None

    def on_train_batch_start(self, batch, batch_idx: int) -> None:
        self.flops_per_batch = self.batch_flops(batch)
        if batch_idx % self.trainer.accumulate_grad_batches == 0:  # Lightning's own rule for a window's first batch
            self._token_window.reset()

    # ---- checkpoints ---------------------------------------------------------------------------------------
    def checkpoint_extras(self) -> dict:
        """Task-specific entries of the checkpoint's "zoo" section (class names, ...)."""
        return {}

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        # Everything needed to rebuild the model (and its tokenizer, class names...) without the config or data.
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        data_class = None if datamodule is None else f"{type(datamodule).__module__}.{type(datamodule).__qualname__}"
        checkpoint["zoo"] = {
            "task": self.task_name,
            "datamodule": data_class,
            "model_type": self.net.model_type,
            "model_config": self.net.config_dict(),
            "tokenizer": None if self.tokenizer is None else self.tokenizer.to_json(),
            **self.checkpoint_extras(),
        }
        # Lightning calls this hook last, once the state dict is final: the checksum covers what is written.
        record_checksum(checkpoint)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        # No state dict: a sharding strategy loaded the weights itself, checked (zoo.strategies.fsdp).
        if "state_dict" not in checkpoint:
            return
        # Checkpoints written before this base held every tensor twice, also under "_forward_fn.": dropped.
        state = checkpoint["state_dict"]
        for key in [k for k in state if k.startswith("_forward_fn.")]:
            del state[key]
        if self._trainer is not None:  # a Lightning resume; load_from_checkpoint has verified in read_checkpoint
            self.check_checkpoint(checkpoint, self._trainer.ckpt_path or "the checkpoint")

    def check_checkpoint(self, checkpoint: dict, source) -> None:
        """Before Lightning loads the weights: their checksum, and that they fit this network (one-line errors
        instead of training from a corrupted file or a traceback from load_state_dict)."""
        verify_checkpoint(checkpoint, source)
        check_same_model(checkpoint, self.net, source)

    @classmethod
    def load_from_checkpoint(
        cls, checkpoint_path: str | Path, map_location: Any = None, strict: bool = True, **kwargs: Any
    ) -> ZooTask:
        """The task stored in a zoo checkpoint (read weights-only), its network rebuilt from the "zoo" section, its
        options, optimizer and scheduler from the recorded hyper-parameters. `kwargs` override them and give what a
        checkpoint holds no object for (`tokenizer=...`). Called on ZooTask it returns the subclass the checkpoint
        names; called on a subclass it refuses a checkpoint of another task."""
        path = str(checkpoint_path)
        checkpoint = read_checkpoint(path)
        info = checkpoint["zoo"]
        task_cls = cls._class_for(info.get("task"), path)
        hparams = dict(checkpoint.get(cls.CHECKPOINT_HYPER_PARAMS_KEY) or {})
        optimizer = rebuild_partial(hparams.pop("optimizer", None), kind="optimizer", source=path)
        scheduler = rebuild_partial(hparams.pop("scheduler", None), kind="scheduler", source=path)
        for key in task_cls.not_rebuilt:
            hparams.pop(key, None)
        params = inspect.signature(task_cls.__init__).parameters.values()
        accepted = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)} - {"self", "net"}
        unknown = sorted(set(kwargs) - accepted)
        if unknown:
            raise TypeError(
                f"{task_cls.__name__} takes no option(s) {', '.join(unknown)}; it takes: {', '.join(sorted(accepted))}"
            )
        stale = sorted(set(hparams) - accepted)
        if stale:  # an option an older zoo recorded and this one no longer has (e.g. one moved to a callback)
            rank_zero_warn(
                f"{path} records option(s) {', '.join(stale)} that {task_cls.__name__} no longer takes; "
                "they are left out"
            )
        hparams = {k: v for k, v in hparams.items() if k in accepted}
        arguments = {"optimizer": optimizer, "scheduler": scheduler, **hparams, **kwargs}
        task = task_cls(build_model(info, path), **arguments)
        task.on_load_checkpoint(checkpoint)  # before the weights, as Lightning orders it when resuming
        task.load_state_dict(checkpoint["state_dict"], strict=strict)
        return task.to(map_location) if map_location is not None else task

    @classmethod
    def _class_for(cls, task_name: str | None, path: str) -> type[ZooTask]:
        if cls is ZooTask:
            if task_name not in ZooTask._by_name:
                raise ValueError(f"{path}: unknown task '{task_name}'; known: {', '.join(sorted(ZooTask._by_name))}")
            return ZooTask._by_name[task_name]
        if task_name != cls.task_name:
            other = ZooTask._by_name.get(task_name)
            hint = f"; load it with {other.__name__}" if other is not None else ""
            raise ValueError(f"{path} is a '{task_name}' checkpoint, not '{cls.task_name}' ({cls.__name__}){hint}")
        return cls


class EvaluatedTask(ZooTask):
    """A task whose validation and test passes are one evaluation: `_evaluate(batch)` per batch (its return value
    is the step's output, for callbacks) and `_log_evaluation(split)`, which logs `<split>/...` and resets."""

    def validation_step(self, batch, batch_idx: int):
        return self._evaluate(batch)

    def on_validation_epoch_end(self) -> None:
        self._log_evaluation("val")

    def test_step(self, batch, batch_idx: int) -> None:
        self._evaluate(batch)

    def on_test_epoch_end(self) -> None:
        self._log_evaluation("test")
