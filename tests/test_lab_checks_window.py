"""window_loss compares like with like: every arm computes attention the same way (the softmax written out), so its
memory check compares full attention's n x n weights with a window's band, not an implementation with another;
its time check reads each arm against a full-attention twin timed in the same process."""

from __future__ import annotations

import json
import math

import pytest
import torch

from zoo.lab.decide.reference import exempt
from zoo.lab.measure.memory import count_saved_tensors
from zoo.lab.questions.configs import composed_config, question
from zoo.models.gpt import GPT, GPTConfig

from conftest import assert_ok, run_script


def saved_mb(n: int, **switches) -> float:
    """What autograd keeps for the backward of one training step of the question's model at context n."""
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=65, block_size=n, n_layer=2, n_head=4, n_embd=128, dropout=0.0, **switches)
    model = GPT(config).train()
    idx = torch.randint(0, 65, (2, n + 1))
    with count_saved_tensors(model) as counter:
        model.loss(idx[:, :-1], idx[:, 1:])
    return counter.bytes / 2**20


def test_every_arm_writes_attention_out_so_the_memory_check_compares_attention_patterns():
    assert composed_config("window_loss")["model"]["net"]["attn_impl"] == "explicit"
    # the question's context and window: written out, the window keeps less than the n x n weights...
    window, full = saved_mb(512, attn_window=128, attn_impl="explicit"), saved_mb(512, attn_impl="explicit")
    assert window < full
    # ...while the fused kernel keeps no n x n matrix at all: against it the comparison would be of kernels
    assert saved_mb(512, attn_impl="sdpa") < window


def test_the_cost_checks_do_not_wait_for_an_arm_to_learn_and_time_the_window_in_one_process():
    lab = question("window_loss")
    cost = [c for c in lab["checks"] if c["metric"].startswith("probe/cost/")]
    assert {c["metric"] for c in cost} == {"probe/cost/saved_mb", "probe/cost/compared_over_step"}
    assert all(exempt(c, lab["reference"]) for c in cost)
    assert composed_config("window_loss")["callbacks"]["cost_probe"]["compare_with"] == {"attn_window": None}


@pytest.mark.slow
@pytest.mark.lab
def test_a_window_loss_job_times_itself_against_its_full_attention_twin(tmp_path, data_dir):
    quick = [o for o in question("window_loss")["quick"] if not o.startswith("model.net.attn_window=")]
    args = ["experiment=lab/window_loss", *quick, "model.net.attn_window=32", "seed=1", "lab.mode=quick"]
    assert_ok(run_script("train.py", *args, f"hydra.run.dir={tmp_path}"))
    metrics = json.loads((tmp_path / "result.json").read_text(), parse_constant=float)["metrics"]
    ratio = metrics["probe/cost/compared_over_step"]
    assert math.isfinite(ratio) and ratio > 0 and "probe/cost/compared_over_step/contended" in metrics
    assert metrics["probe/cost/compared_step_ms"] > 0 and metrics["probe/cost/saved_mb"] > 0
