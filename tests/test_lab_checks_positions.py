"""The positions question judges every variant's extrapolation on the same windows and positions: LengthProbe's
`loss_window` reads the same tokens past the training length as `loss_beyond`, each from its own last L tokens
only, so the two are equal exactly when the context beyond L changes nothing; the checks compare those two."""

from __future__ import annotations

import math

import lightning as L
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from lab_sweeps import one_job

from zoo.data.windows import DisjointWindows
from zoo.lab.probes.lengths import LengthProbe
from zoo.lab.questions.configs import question
from zoo.models.gpt import GPT, GPTConfig

TRAIN_LEN = 8


class Wrapped(L.LightningModule):
    """The probe reads a LightningModule that maps token ids to logits."""

    def __init__(self, net: GPT) -> None:
        super().__init__()
        self.net = net

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.net(idx)


def model(positions: str, n_layer: int = 1, window: int | None = None) -> Wrapped:
    torch.manual_seed(0)
    shape = dict(vocab_size=11, block_size=32, n_layer=n_layer, n_head=2, n_embd=16, dropout=0.0)
    net = GPT(GPTConfig(**shape, positions=positions, attn_window=window))
    if positions == "learned":  # rows past the training length, as training would leave them: unlike the others
        with torch.no_grad():
            net.pos_emb.weight[TRAIN_LEN:] = torch.randn_like(net.pos_emb.weight[TRAIN_LEN:])
    return Wrapped(net)


def losses(module: Wrapped, length: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss per position past TRAIN_LEN with the whole window, the same with each token's last TRAIN_LEN only)."""
    tokens = np.random.default_rng(0).integers(0, 11, 400).astype(np.uint16)
    probe = LengthProbe(factors=[4], max_windows=3, batch_size=2)
    whole = probe._loss_by_position(module, tokens, length)[TRAIN_LEN:]
    return whole, probe._loss_within_training_length(module, tokens, length, TRAIN_LEN)


def test_the_window_loss_is_each_token_read_from_its_own_last_training_length_of_context():
    module = model("learned", n_layer=2)
    module.eval()
    tokens = np.random.default_rng(0).integers(0, 11, 400).astype(np.uint16)
    probe = LengthProbe(factors=[4], max_windows=3, batch_size=2)
    found = probe._loss_within_training_length(module, tokens, 32, TRAIN_LEN)
    windows = DisjointWindows(tokens, 32, seed=0)  # the windows _loss_by_position reads, in its order
    expected = torch.zeros(32 - TRAIN_LEN, dtype=torch.float64)
    with torch.no_grad():
        for i in range(3):
            idx, targets = windows[i]
            for t in range(TRAIN_LEN, 32):
                logits = module(idx[t - TRAIN_LEN + 1 : t + 1][None])[0, -1]
                expected[t - TRAIN_LEN] += F.cross_entropy(logits[None], targets[t][None]).item()
    assert torch.allclose(found, expected / 3, atol=1e-5)


def test_a_model_that_cannot_see_past_the_training_length_loses_nothing_to_the_longer_window():
    # one layer of relative positions whose attention window is the training length: the whole window and the
    # token's last TRAIN_LEN tokens are the same context, so the two readings must agree
    whole, window = losses(model("rope", window=TRAIN_LEN))
    assert torch.allclose(whole, window, atol=1e-5)
    # absolute positions past the training length are rows it never saw: the same tokens, a different loss
    whole, window = losses(model("learned", window=TRAIN_LEN))
    assert not torch.allclose(whole, window, atol=1e-3)


def test_every_extrapolation_check_compares_the_same_tokens_of_the_same_windows():
    checks = question("positions")["checks"]
    beyond = [c for c in checks if "lab/loss_beyond@4x" in (c["metric"], c.get("metric_b"))]
    assert len(beyond) == 4
    for check in beyond:
        if check.get("metric_b"):  # a variant against itself: the whole window vs the token's last 64
            assert check["metric_b"] == "lab/loss_window@4x" and check["points"][0] == check["points"][1]
        else:  # two variants on the same metric
            assert check["points"][0] != check["points"][1]
    assert not any(c.get("metric_b") == "lab/loss@1x" for c in checks)
    variants = {c["points"][0]["variant"] for c in beyond if c.get("metric_b")}
    assert variants == {"learned", "sinusoidal", "alibi"}


@pytest.mark.slow
@pytest.mark.lab
def test_a_positions_job_records_both_readings_at_each_longer_length(tmp_path_factory, data_dir):
    # the job of tests/test_lab.py's ONE_JOB (its length probe's loss by position is checked there), run once
    _, record = one_job(tmp_path_factory, "positions", variant="alibi")
    metrics = record["metrics"]
    for factor in ("2x", "4x"):
        for name in ("loss_beyond", "loss_window"):
            assert math.isfinite(metrics[f"lab/{name}@{factor}"]) and metrics[f"lab/{name}@{factor}"] > 0
    assert "lab/loss_window@1x" not in metrics  # at the training length there is nothing beyond it
