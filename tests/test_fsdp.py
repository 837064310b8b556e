"""trainer=fsdp: torch's fully_shard (FSDP2) per core Block under Lightning's ModelParallelStrategy.

On CPU processes over gloo: 2 processes train, save and resume, and reproduce one unsharded process on the same
global batch; the checkpoint is a full state dict that resumes without FSDP and that eval.py, generate.py and
zoo-export read. In one process: the optimizer groups see each parameter's logical shape (weight decay for the
matrices only), every parameter is sharded, and Muon is refused in one line.
"""

from __future__ import annotations

import json
import socket
from functools import partial

import pytest
import torch
import torch.distributed as dist

from zoo.core.block import Block
from zoo.entry.export import main as export_main
from zoo.models.gpt import GPT
from zoo.optim.param_groups import param_groups
from zoo.strategies.fsdp import FSDP2Strategy, check_optimizer_for_sharding, shard_per_block

from benchmarks import optimizer_groups
from conftest import assert_ok, assert_one_line_error, run_script

FSDP_CPU = [
    "trainer=fsdp",
    "trainer.accelerator=cpu",
    "trainer.devices=2",
    "trainer.precision=32-true",
    "trainer.strategy.param_dtype=null",
]
RUN = [
    "trainer.val_check_interval=10",
    "trainer.limit_val_batches=4",
    "test=false",
    "trainer.deterministic=true",
    "model.num_samples=0",
    "callbacks.progress_bar=null",
    "seed=3",
]


def _value(run_dir) -> float:
    return json.loads((run_dir / "result.json").read_text())["value"]


@pytest.mark.slow
def test_two_sharded_processes_train_resume_and_match_one_process(tmp_path):
    """Global batch 12 (2 ranks x 6): one process on the whole batch for 10 steps; FSDP for 5 steps, then resumed
    to 10 with FSDP and, from the same checkpoint, without it. All three end at the same validation loss."""
    one = tmp_path / "one_process"
    assert_ok(run_script("train.py", "trainer=cpu", *RUN, "trainer.max_steps=10", f"hydra.run.dir={one}"))
    sharded = tmp_path / "fsdp"
    assert_ok(run_script("train.py", *FSDP_CPU, *RUN, "trainer.max_steps=5", f"hydra.run.dir={sharded}"))
    checkpoint = sharded / "checkpoints" / "last.ckpt"
    saved = torch.load(checkpoint, weights_only=True, map_location="cpu")
    assert saved["global_step"] == 5
    # A full state dict: plain tensors of their logical shapes, under the names an unsharded run writes.
    unsharded_names = torch.load(one / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    assert {k: t.shape for k, t in saved["state_dict"].items()} == {
        k: t.shape for k, t in unsharded_names["state_dict"].items()
    }
    assert all(type(t) is torch.Tensor for t in saved["state_dict"].values())
    # The groups it trained with: matrices decay, vectors do not (benchmarks/gpu.sh runs the same check on GPUs).
    assert optimizer_groups.problems(saved) == []
    decay, no_decay = optimizer_groups.group_shapes(saved)
    assert decay[0] > 0 and set(decay[1]) == {2} and no_decay[0] == 0 and set(no_decay[1]) == {1}

    resumed = tmp_path / "fsdp_resumed"
    assert_ok(
        run_script(
            "train.py", *FSDP_CPU, *RUN, "trainer.max_steps=10", f"ckpt_path={checkpoint}", f"hydra.run.dir={resumed}"
        )
    )
    unsharded = tmp_path / "resumed_without_fsdp"
    assert_ok(
        run_script(
            "train.py",
            "trainer=cpu",
            *RUN,
            "trainer.max_steps=10",
            f"ckpt_path={checkpoint}",
            f"hydra.run.dir={unsharded}",
        )
    )
    reference = _value(one)
    assert reference < 4.0  # it trained
    assert _value(resumed) == pytest.approx(reference, rel=1e-5, abs=1e-5)
    assert _value(unsharded) == pytest.approx(reference, rel=1e-5, abs=1e-5)

    # The entries read a sharded run's checkpoint like any other.
    result = run_script("eval.py", f"ckpt_path={checkpoint}", "split=val", "trainer.limit_val_batches=2")
    assert_ok(result)
    result = run_script("generate.py", str(checkpoint), "--max-new-tokens", "5", "--seed", "1")
    assert_ok(result)
    assert "----- sample 0 -----" in result.stdout
    export_main([str(checkpoint), str(tmp_path / "export")])
    assert (tmp_path / "export" / "model.safetensors").is_file()


@pytest.mark.slow
def test_muon_with_fsdp_is_refused_before_any_process_starts(tmp_path):
    result = run_script(
        "train.py",
        *FSDP_CPU,
        "model.optimizer._target_=zoo.optim.muon.MuonWithAdamW",
        "trainer.max_steps=2",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert_one_line_error(result, "is not supported with trainer=fsdp", "Muon orthogonalises whole matrices")
    assert not (tmp_path / "run").exists()


# ---- in one process: a world of one over gloo -------------------------------------------------------------------
@pytest.fixture
def mesh_of_one():
    from torch.distributed.device_mesh import init_device_mesh

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        yield init_device_mesh("cpu", (1,), mesh_dim_names=("data_parallel",))
    finally:
        dist.destroy_process_group()


def _tiny_gpt() -> GPT:
    torch.manual_seed(0)
    return GPT.from_preset("gpt-mini", vocab_size=40, block_size=16, n_layer=2)


def test_sharded_parameters_keep_their_names_shapes_and_weight_decay_groups(mesh_of_one):
    from torch.distributed.tensor import DTensor

    plain, sharded = _tiny_gpt(), _tiny_gpt()
    shard_per_block(sharded, mesh_of_one)
    params = dict(sharded.named_parameters())
    assert params.keys() == dict(plain.named_parameters()).keys()
    assert all(isinstance(p, DTensor) for p in params.values())  # every parameter belongs to a sharded module
    assert {n: p.shape for n, p in params.items()} == {n: p.shape for n, p in plain.named_parameters()}

    def names(model, groups):
        by_id = {id(p): n for n, p in model.named_parameters()}
        return [sorted(by_id[id(p)] for p in g["params"]) for g in groups]

    expected = names(plain, param_groups(plain, 0.1))
    assert names(sharded, param_groups(sharded, 0.1)) == expected
    assert expected[0] and expected[1]  # matrices decay, biases and norm scales do not
    # Each Block is a unit of its own; sharding twice is a no-op.
    assert all(type(m).__name__.startswith("FSDP") for m in sharded.modules() if isinstance(m, Block))
    shard_per_block(sharded, mesh_of_one)


def test_a_sharded_model_computes_what_the_plain_one_does(mesh_of_one):
    plain, sharded = _tiny_gpt(), _tiny_gpt()
    shard_per_block(sharded, mesh_of_one)
    idx = torch.randint(0, 40, (2, 16), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(sharded(idx), plain(idx), rtol=1e-6, atol=1e-6)
    loss_plain, loss_sharded = plain.loss(idx, idx), sharded.loss(idx, idx)
    loss_plain.backward()
    loss_sharded.backward()
    for (name, p), q in zip(plain.named_parameters(), sharded.parameters()):
        torch.testing.assert_close(q.grad.full_tensor(), p.grad, rtol=1e-5, atol=1e-6, msg=name)


def test_the_group_check_catches_flattened_parameters():
    """What FSDP1 with flattened parameters would have trained with: every tensor 1-D, none decaying."""
    flat = {
        "optimizer_states": [
            {
                "state": {0: {"exp_avg": torch.zeros(6)}, 1: {"exp_avg": torch.zeros(3)}},
                "param_groups": [{"weight_decay": 0.1, "params": []}, {"weight_decay": 0.0, "params": [0, 1]}],
            }
        ]
    }
    assert optimizer_groups.problems(flat) == [
        "weight decay is configured but no tensor decays (parameters seen as 1-D shards?)"
    ]
    flat["optimizer_states"][0]["param_groups"][0]["params"] = [1]
    assert "group 0 decays (weight_decay=0.1) 1 tensor(s) of 1 dimension" in optimizer_groups.problems(flat)


def test_muon_is_refused_for_sharded_matrices():
    from zoo.optim.muon import MuonWithAdamW

    with pytest.raises(ValueError, match="MuonWithAdamW is not supported with trainer=fsdp"):
        check_optimizer_for_sharding(partial(MuonWithAdamW, lr=1e-3))
    check_optimizer_for_sharding(partial(torch.optim.AdamW, lr=1e-3))  # AdamW works elementwise on shards


def test_strategy_options_are_checked():
    with pytest.raises(ValueError, match="trainer.strategy.param_dtype must be one of bfloat16"):
        FSDP2Strategy(param_dtype="bf16")
    with pytest.raises(ValueError, match="save_distributed_checkpoint=true is not supported"):
        FSDP2Strategy(save_distributed_checkpoint=True)
