"""Fully sharded data parallel training (FSDP2): torch's `fully_shard` applied per core `Block`, under Lightning's
`ModelParallelStrategy`.

Why FSDP2 and not Lightning's `FSDPStrategy` (FSDP1): FSDP1 refuses to run on a CPU, so it could never be tested
here, and with `use_orig_params` it hands the optimizer flattened 1-D shards, so the rule "no weight decay below
2-D" (zoo.optim.param_groups.param_groups) and Muon's matrices would see the wrong shapes. `fully_shard` keeps every
parameter a DTensor with its logical shape and name, shards it over the data-parallel mesh, and trains on CPU
processes over gloo as on GPUs over NCCL.

The mesh is one-dimensional: every process holds a shard (data parallel over all of them, no tensor parallel).
Each core Block is its own unit (its parameters gathered just before its forward and freed after), and the
root module holds what is left (embeddings, final norm, heads). Checkpoints are full state dicts written by rank 0
(`save_distributed_checkpoint=False`), so a sharded run resumes unsharded and eval.py, generate.py and zoo-export
read its checkpoints like any other.

Every forward gathers parameters from all processes, so every process must run the same forwards in the same order,
also at evaluation: the samples, translations and attention pictures of a validation run on every rank (only rank 0
logs them), and decoding loops whose processes would stop at different steps run in lockstep (`lockstep`).
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
# Methods that run the network at evaluation without going through `forward` (a translation's encoder and decoder
# steps, the attention maps of a ViT): wrapped like forward, so that the root's parameters are gathered for them.
EVALUATION_METHODS = ("generate", "attention_maps")


class FSDP2Strategy(ModelParallelStrategy):
    """ModelParallelStrategy on a one-dimensional mesh of all processes, with the options of `fully_shard`.

    param_dtype / reduce_dtype: torch's MixedPrecisionPolicy (null keeps the parameters' own dtype): "bfloat16"
    gathers the parameters in bf16 for forward and backward and reduces gradients in `reduce_dtype`, while the
    sharded parameters and the optimizer state stay fp32. reshard_after_forward: free each block's gathered
    parameters after its forward (gathered again for backward; saves memory at the cost of one more all-gather).
    """

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
        # Lightning's loader puts the weights straight into the shards and hands the task's on_load_checkpoint a
        # checkpoint without them: the task checks the file here first (checksum, the network it fits).
        path = Path(self.broadcast(checkpoint_path))
        if path.is_file():
            full = torch.load(path, mmap=True, map_location="cpu", weights_only=True)
            self.lightning_module.check_checkpoint(full, path)
            del full
        return super().load_checkpoint(checkpoint_path, weights_only=weights_only)

    def setup_environment(self) -> None:
        # Known only once the processes exist: every one of them is a data-parallel shard.
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
    """`fully_shard` every core Block inside `module`, then `module` itself (the parameters outside the blocks).
    Idempotent: Lightning calls configure_model again for a test after fit."""
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
    # A model's other forwards (the fused training loss) and its evaluation methods gather the root's parameters as
    # forward does.
    for name in (*getattr(module, "forward_methods", ()), *EVALUATION_METHODS):
        if callable(getattr(module, name, None)):
            register_fsdp_forward_method(module, name)


def lockstep(module: nn.Module) -> Callable[[bool], bool] | None:
    """For a decoding loop (`any_running` of zoo.core.decoding) on a module sharded over several processes: each
    step gathers the blocks' parameters from all of them, so they must take the same number of steps, also when
    their own inputs end sooner. The function returned says whether any process still decodes (one all-reduce of a
    flag per step); None where the module is not sharded over several processes (nothing to keep in step)."""
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
    """Muon orthogonalises whole matrices; on a sharded matrix each process holds only some of its rows.
    `optimizer`: a partial, a class or its dotted path (model.optimizer._target_)."""
    target = getattr(optimizer, "func", optimizer)
    name = (target if isinstance(target, str) else getattr(target, "__name__", "")).rsplit(".", 1)[-1]
    if "Muon" in name:
        raise ValueError(
            f"model.optimizer {name} is not supported with trainer=fsdp: Muon orthogonalises whole matrices and "
            "FSDP shards them over the processes; use Muon with trainer=ddp, or AdamW "
            "(model.optimizer._target_=torch.optim.AdamW) with trainer=fsdp"
        )
