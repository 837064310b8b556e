"""The scaling question's gradient checks read what their claim says: the gradient probe records the trained
model's last optimizer step (`@last`), and at init the scale divides W_q's gradient by sqrt(d_k), which the
question's sanity check relies on."""

from __future__ import annotations

import json

import pytest
import torch

from zoo.lab.probes.probes import gradient_norms
from zoo.lab.questions.configs import question
from zoo.models.gpt import GPT, GPTConfig

from conftest import assert_ok, run_script


@pytest.mark.slow
@pytest.mark.lab
def test_the_gradient_probe_records_the_last_optimizer_step_whatever_every_n_steps_is(tmp_path, data_dir):
    # 5 steps, every 3: the regular readings are steps 0 and 3; the last step (4) is read too, and it is `@last`
    quick = [o for o in question("scaling")["quick"] if not o.startswith(("model.net.n_embd=", "trainer.max_steps"))]
    args = ["experiment=lab/scaling", *quick, "trainer.max_steps=5", "model.net.n_embd=16", "seed=1"]
    args += ["callbacks.grad_norm_probe.every_n_steps=3", "lab.mode=quick", f"hydra.run.dir={tmp_path}"]
    assert_ok(run_script("train.py", *args))
    record = json.loads((tmp_path / "result.json").read_text(), parse_constant=float)
    read = [int(step) for step, values in record["probes"].items() if "probe/grad_group/attn.q" in values]
    assert sorted(read) == [0, 3, 4]
    last = record["probes"]["4"]
    for group in ("attn.q", "attn.k"):
        assert record["metrics"][f"probe/grad_group/{group}@last"] == last[f"probe/grad_group/{group}"] > 0
        assert record["metrics"][f"probe/grad_group/{group}@init"] == record["probes"]["0"][f"probe/grad_group/{group}"]


def test_the_scaling_claim_checks_read_the_gradient_of_the_trained_model_and_init_only_as_a_sanity_check():
    checks = question("scaling")["checks"]
    gradient = [c for c in checks if c["metric"].startswith("probe/grad_group/")]
    claims = {c["metric"] for c in gradient if c.get("kind", "claim") == "claim"}
    assert claims == {"probe/grad_group/attn.q@last", "probe/grad_group/attn.k@last"}
    assert [c["metric"] for c in gradient if c.get("kind") == "sanity"] == ["probe/grad_group/attn.q@init"]


def test_at_init_the_unscaled_w_q_gradient_is_larger_by_most_of_sqrt_dk():
    """The premise of the sanity check, on the real model at d_k 256: same weights, same batch, the scale on or off."""
    torch.manual_seed(0)
    config = dict(vocab_size=65, block_size=64, n_layer=2, n_head=1, n_embd=256, dropout=0.0)
    scaled = GPT(GPTConfig(**config, attn_scale="sqrt_dk"))
    unscaled = GPT(GPTConfig(**config, attn_scale="none"))
    unscaled.load_state_dict(scaled.state_dict())
    idx = torch.randint(0, 65, (4, 64))
    norms = []
    for model in (scaled, unscaled):
        model.loss(idx[:, :-1], idx[:, 1:]).backward()
        norms.append(gradient_norms(model)["probe/grad_group/attn.q"])
    ratio = norms[1] / norms[0]
    sanity = next(c for c in question("scaling")["checks"] if c.get("kind") == "sanity")
    # the scale's 16, and a little more: the unscaled softmax already moves more per unit of logit (20.6 here)
    assert sanity["factor"] < ratio < 2 * 16, ratio
