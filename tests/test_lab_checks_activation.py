"""The activation question measures "ReLU is cheap": ActivationCostProbe times ReLU and GELU (alone and in the
FFN) interleaved in one process on the shape the model's FFN saw, and a job of the question records it. No test
asserts which is faster: only that what is recorded is what the names say."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

from zoo.core.feedforward import FeedForward
from zoo.lab.decide.reference import exempt
from zoo.lab.measure.activation_cost import ActivationCostProbe, time_activations
from zoo.lab.questions.configs import question

from conftest import assert_ok, run_script


def test_each_activation_is_timed_alone_and_in_the_ffn_with_its_ratio_and_the_model_is_left_alone():
    torch.manual_seed(0)
    ffn = FeedForward(16, 64, activation="gelu")
    before = {k: v.clone() for k, v in ffn.state_dict().items()}
    metrics = time_activations(ffn, torch.Size([2, 8, 16]), ("relu", "gelu"), rounds=3, calls={"act": 2, "ffn": 2})
    for part in ("act", "ffn"):
        for name in ("relu", "gelu"):
            assert metrics[f"lab/{part}_ms/{name}"] > 0
            assert metrics[f"lab/{part}_ms/{name}/contended"] in (0.0, 1.0)
        ratio = metrics[f"lab/{part}_ms/gelu_over_relu"]
        assert ratio == pytest.approx(metrics[f"lab/{part}_ms/gelu"] / metrics[f"lab/{part}_ms/relu"])
        assert metrics[f"lab/{part}_ms/gelu_over_relu/spread"] == max(
            metrics[f"lab/{part}_ms/gelu/spread"], metrics[f"lab/{part}_ms/relu/spread"]
        )
    assert isinstance(ffn.act, nn.GELU)  # the twins are copies: the model keeps its activation and weights
    assert all(torch.equal(before[k], v) for k, v in ffn.state_dict().items())
    assert all(p.grad is None for p in ffn.parameters())


def test_bad_settings_are_one_line_errors():
    with pytest.raises(ValueError, match="activations must be 2\\+ of relu"):
        ActivationCostProbe(activations=("relu", "swish"))
    with pytest.raises(ValueError, match="rounds \\(0\\)"):
        ActivationCostProbe(rounds=0)


@pytest.mark.slow
@pytest.mark.lab
def test_an_activation_job_records_the_timing_its_cheap_check_reads(tmp_path, data_dir):
    lab = question("activation")
    (cheap,) = [c for c in lab["checks"] if c["metric"] == "lab/act_ms/gelu_over_relu"]
    assert cheap["expect"] == "above" and cheap["threshold"] > 1
    assert exempt(cheap, lab["reference"])  # a timing does not wait for the arm to have learned
    overrides = [o for o in lab["quick"] if not o.startswith("seed=")]
    args = ["experiment=lab/activation", *overrides, "model.net.activation=relu", "seed=1", "lab.mode=quick"]
    assert_ok(run_script("train.py", *args, f"hydra.run.dir={tmp_path}"))
    metrics = json.loads((tmp_path / "result.json").read_text(), parse_constant=float)["metrics"]
    for key in ("lab/act_ms/relu", "lab/act_ms/gelu", "lab/ffn_ms/relu", "lab/ffn_ms/gelu"):
        assert math.isfinite(metrics[key]) and metrics[key] > 0
    assert metrics["lab/act_ms/gelu_over_relu"] == pytest.approx(
        metrics["lab/act_ms/gelu"] / metrics["lab/act_ms/relu"]
    )
    assert {"lab/act_ms/gelu_over_relu/contended", "lab/act_ms/gelu_over_relu/spread"} <= set(metrics)
