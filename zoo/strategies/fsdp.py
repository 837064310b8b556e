"""Fully sharded data parallel training (FSDP2): torch's `fully_shard` per core `Block`, under Lightning's
`ModelParallelStrategy`, on a one-dimensional mesh of all processes.

Not Lightning's `FSDPStrategy` (FSDP1): it refuses to run on a CPU (so it could not be tested here), and with
`use_orig_params` it hands the optimizer flattened 1-D shards, so "no weight decay below 2-D" and Muon's matrices
would see the wrong shapes. `fully_shard` keeps every parameter a DTensor with its logical shape and name.
Checkpoints are full state dicts written by rank 0, so eval.py, generate.py and zoo-export read them like any other.

Every forward gathers parameters from all processes, so every process must run the same forwards in the same order,
also at evaluation (samples, translations, attention pictures run on every rank; decoding loops run in `lockstep`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from lightning.pytorch.strategies import ModelParallelStrategy
from torch import nn

from zoo.core.block import Block

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
# Methods that run the network without `forward`: wrapped like it, so that the root's parameters are gathered.
EVALUATION_METHODS = ("generate", "attention_maps")


class FSDP2Strategy(ModelParallelStrategy):
    """ModelParallelStrategy with the options of `fully_shard`: param_dtype / reduce_dtype (torch's
    MixedPrecisionPolicy; null keeps the parameters' dtype), reshard_after_forward (see zoo/conf/trainer/fsdp.yaml)."""

    def __init__(
        self,
        *,
        param_dtype: str | None = None,
        reduce_dtype: str | None = None,
        reshard_after_forward: bool = True,
        **kwargs: Any,
    ) -> None:
        for key, value in (("param_dtype", param_dtype), ("reduce_dtype", reduce_dtype)):
            if value is not None and value not in DTYPES:
                raise ValueError(f"trainer.strategy.{key} must be one of {', '.join(DTYPES)} or null, got {value!r}")
        if kwargs.get("save_distributed_checkpoint"):
            raise ValueError(
                "trainer.strategy.save_distributed_checkpoint=true is not supported: zoo's checkpoints are single "
                "files (resumable without FSDP, read by eval.py, generate.py and zoo-export); leave it false"
            )
        kwargs["save_distributed_checkpoint"] = False
        super().__init__(data_parallel_size=1, tensor_parallel_size=1, **kwargs)
        self.fsdp_options = {
            "param_dtype": None if param_dtype is None else DTYPES[param_dtype],
            "reduce_dtype": None if reduce_dtype is None else DTYPES[reduce_dtype],
            "reshard_after_forward": reshard_after_forward,
        }

    def load_checkpoint(self, checkpoint_path, weights_only: bool | None = None) -> dict[str, Any]:
        # Lightning's loader puts the weights straight into the shards: the task checks the file here first.
        path = Path(self.broadcast(checkpoint_path))
        if path.is_file():
            full = torch.load(path, mmap=True, map_location="cpu", weights_only=True)
            self.lightning_module.check_checkpoint(full, path)
            del full
        return super().load_checkpoint(checkpoint_path, weights_only=weights_only)

    def setup_environment(self) -> None:
        self._data_parallel_size = self.num_nodes * self.num_processes
        self._tensor_parallel_size = 1
        super().setup_environment()


def is_sharded(module: nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(module, FSDPModule)


def shard_per_block(
    module: nn.Module,
    mesh,
    *,
    param_dtype: torch.dtype | None = None,
    reduce_dtype: torch.dtype | None = None,
    reshard_after_forward: bool = True,
) -> None:
    """`fully_shard` every core Block inside `module`, then `module` itself. Idempotent: Lightning calls
    configure_model again for a test after fit."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard, register_fsdp_forward_method

    if is_sharded(module):
        return
    mesh = mesh["data_parallel"] if mesh.mesh_dim_names and "data_parallel" in mesh.mesh_dim_names else mesh
    module.sharding_mesh = mesh  # for `lockstep`: the parameters are plain tensors while gathered
    options = {"mesh": mesh, "mp_policy": MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)}
    for block in [m for m in module.modules() if isinstance(m, Block)]:
        fully_shard(block, reshard_after_forward=reshard_after_forward, **options)
    # The root's parameters are needed again first in backward (the head): no point freeing them after forward.
    fully_shard(module, reshard_after_forward=False, **options)
    for name in (*getattr(module, "forward_methods", ()), *EVALUATION_METHODS):
        if callable(getattr(module, name, None)):
            register_fsdp_forward_method(module, name)


def lockstep(module: nn.Module) -> Callable[[bool], bool] | None:
    """For a decoding loop on a module sharded over several processes, which must all take the same number of steps:
    whether any process still decodes (one all-reduce per step); None where the module is not so sharded."""
    mesh = getattr(module, "sharding_mesh", None)
    if not is_sharded(module) or mesh is None or mesh.size() <= 1:
        return None
    group = mesh.get_group()

    def any_running(running: bool) -> bool:
        flag = torch.tensor([1 if running else 0], dtype=torch.int32, device=mesh.device_type)  # "cuda": this rank's
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
        return bool(flag.item())

    return any_running


def check_optimizer_for_sharding(optimizer) -> None:
    """Refuse Muon, which orthogonalises whole matrices; `optimizer`: a partial, a class or its dotted path."""
    target = getattr(optimizer, "func", optimizer)
    name = (target if isinstance(target, str) else getattr(target, "__name__", "")).rsplit(".", 1)[-1]
    if "Muon" in name:
        raise ValueError(
            f"model.optimizer {name} is not supported with trainer=fsdp: Muon orthogonalises whole matrices and "
            "FSDP shards them over the processes; use Muon with trainer=ddp, or AdamW "
            "(model.optimizer._target_=torch.optim.AdamW) with trainer=fsdp"
        )
