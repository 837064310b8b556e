"""The probes of the lab's part 2 (issue 12) measure what they say: activation scale and FFN sparsity, BatchNorm
batch-statistics fluctuation, divergence, gradient norms by depth, and the BatchNorm fold's equality and timing."""

from __future__ import annotations

import math

import pytest
import torch
from lab_sweeps import quick_job
from torch import nn

from zoo.core import BlockStack
from zoo.core.norms import MaskedTokenBatchNorm, TokenBatchNorm
from zoo.lab.probes.activations import measure_activations
from zoo.lab.probes.batchnorm_stats import BatchNormStatsProbe
from zoo.lab.probes.divergence import LossCurveProbe, divergence
from zoo.lab.probes.probes import gradient_norms, layers_in_order


class Stack(nn.Module):
    """A bare stack of zoo blocks, called like a task on (inputs, targets) batches."""

    def __init__(self, **block_kwargs):
        super().__init__()
        self.blocks = BlockStack(3, 16, final_norm=False, n_heads=2, d_ff=32, **block_kwargs)

    def forward(self, x):
        return self.blocks(x)


def test_activation_rms_is_the_block_output_scale():
    torch.manual_seed(0)
    model = Stack(activation="relu")
    with torch.no_grad():  # sub-layers write nothing: every block hands its input on unchanged
        for layer in model.blocks.layers:
            layer.self_attn.out.weight.zero_()
            layer.self_attn.out.bias.zero_()
            layer.ff.fc2.weight.zero_()
            layer.ff.fc2.bias.zero_()
    x = torch.randn(4, 10, 16)
    values = measure_activations(model, (x, None))
    for i in range(3):
        assert values[f"probe/act_rms/l{i}"] == pytest.approx(float(x.square().mean().sqrt()), rel=1e-6)
    values = measure_activations(model, (3 * x, None))
    assert values["probe/act_rms/mean"] == pytest.approx(3 * float(x.square().mean().sqrt()), rel=1e-6)


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_ffn_sparsity_counts_the_activations_that_are_off(activation):
    torch.manual_seed(0)
    model = Stack(activation=activation)
    x = torch.randn(4, 10, 16)
    pre = []  # the FFN's pre-activations, captured independently of the probe
    handles = [layer.ff.fc1.register_forward_hook(lambda m, a, out: pre.append(out)) for layer in model.blocks.layers]
    values = measure_activations(model, (x, None), near_zero=1e-2)
    for h in handles:
        h.remove()
    if activation == "relu":  # exactly the negative pre-activations are zeroed
        expected = [float((p <= 0).double().mean()) for p in pre]
        assert [values[f"probe/ffn_zero/l{i}"] for i in range(3)] == pytest.approx(expected)
        assert 0.3 < values["probe/ffn_zero/mean"] < 0.7
    else:  # GELU is exactly zero almost nowhere, but small on the negative side
        assert values["probe/ffn_zero/mean"] < 0.01
        expected = [float((nn.functional.gelu(p).abs() < 1e-2).double().mean()) for p in pre]
        assert [values[f"probe/ffn_near_zero/l{i}"] for i in range(3)] == pytest.approx(expected)
    with torch.no_grad():  # all pre-activations far below zero: every unit off
        for layer in model.blocks.layers:
            layer.ff.fc1.bias.fill_(-1e3)
    off = measure_activations(model, (x, None))
    assert off["probe/ffn_near_zero/mean"] == 1.0
    if activation == "relu":
        assert off["probe/ffn_zero/mean"] == 1.0


def bn_probe(norm: nn.Module, window: int = 100) -> BatchNormStatsProbe:
    probe = BatchNormStatsProbe(window=window)
    probe.attach(norm)
    norm.train()
    return probe


def test_bn_fluctuation_is_zero_for_a_constant_batch_and_one_over_sqrt_n_for_noise():
    torch.manual_seed(0)
    norm = TokenBatchNorm(32)
    probe = bn_probe(norm)
    batch = torch.randn(4, 16, 32) * 2 + 1
    for _ in range(30):
        norm(batch)
    stats = probe.summary()
    (label,) = stats["mean_std"]
    assert stats["mean_std"][label] < 1e-5 and stats["var_std"][label] < 1e-4
    # The batch statistic read back from the running update is the batch's own mean over batch and tokens.
    torch.testing.assert_close(probe.samples[label][-1][0], batch.mean((0, 1)).double(), rtol=1e-4, atol=1e-5)
    assert math.isfinite(stats["mean_dev"][label])

    norm = TokenBatchNorm(32)
    probe = bn_probe(norm)
    for _ in range(200):
        norm(torch.randn(4, 16, 32))  # 64 values per channel: the batch mean has a std of 1/8
    (value,) = probe.summary()["mean_std"].values()
    assert value == pytest.approx(1 / 8, rel=0.15)
    probe.detach()
    norm(torch.randn(4, 16, 32))
    assert len(probe.samples[label]) == 100  # the window, and no sample after detaching


def test_bn_probe_reads_the_statistics_masked_batchnorm_used():
    torch.manual_seed(0)
    norm = MaskedTokenBatchNorm(8)
    probe = bn_probe(norm)
    x = torch.randn(3, 6, 8)
    mask = torch.tensor([[1] * 6, [1] * 2 + [0] * 4, [1] * 4 + [0] * 2], dtype=torch.bool)
    x[~mask] = 100.0  # padding with values that would dominate naive statistics
    norm(x, mask)
    (label,) = probe.samples
    torch.testing.assert_close(probe.samples[label][-1][0], x[mask].mean(0).double(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(probe.samples[label][-1][1], x[mask].var(0).double(), rtol=1e-4, atol=1e-5)


def test_divergence_of_known_curves():
    assert divergence([3.0, 2.5, 2.0, 1.5, 1.0, 0.9], k=2)["lab/diverged"] == 0.0
    rising = divergence([2.0, 2.1, 2.5, 3.0, 4.0, 9.0], k=2)
    assert rising["lab/diverged"] == 1.0 and rising["lab/loss_end"] == pytest.approx(6.5)
    blown = divergence([2.0, 1.9, 1.8, float("nan"), float("nan")], k=2)
    assert blown["lab/diverged"] == 1.0 and math.isnan(blown["lab/loss_end"])
    assert blown["lab/nonfinite_steps"] == pytest.approx(0.4)
    probe = LossCurveProbe(every_n_steps=2, k=1)
    probe.losses = [4.0, 2.0, 3.0, 1.0, 0.5]
    assert probe.result_record()["series"]["train_loss"] == [3.0, 2.0, 0.5]


def test_gradient_norm_first_over_last_and_depth_order():
    torch.manual_seed(0)
    model = Stack()
    model(torch.randn(2, 5, 16)).square().mean().backward()
    values = gradient_norms(model)
    depth = layers_in_order(values, "probe/grad/")
    assert depth == [values[f"probe/grad/l{i}"] for i in range(3)]
    assert values["probe/grad/first_over_last"] == pytest.approx(depth[0] / depth[2])
    mixed = {"probe/grad/l10": 1.0, "probe/grad/l2": 2.0, "probe/grad/decoder.l0": 3.0}
    assert layers_in_order(mixed, "probe/grad/") == [2.0, 1.0]  # by depth, the main stack only
    assert layers_in_order(mixed, "probe/grad/", "decoder.") == [3.0]


def test_gradient_norm_ratio_per_stack_of_an_encoder_decoder():
    from zoo.models import Transformer

    torch.manual_seed(0)
    net = Transformer.from_preset(
        "transformer-small",
        src_vocab_size=50,
        tgt_vocab_size=50,
        d_model=32,
        d_ff=64,
        n_heads=2,
        n_encoder_layers=3,
        n_decoder_layers=2,
        max_len=16,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    src, tgt = torch.randint(3, 50, (2, 7)), torch.randint(3, 50, (2, 6))
    net(src, tgt).square().mean().backward()
    values = gradient_norms(net)
    for stack, last in (("encoder", 2), ("decoder", 1)):
        ratio = values[f"probe/grad/{stack}.l0"] / values[f"probe/grad/{stack}.l{last}"]
        assert values[f"probe/grad/{stack}.first_over_last"] == pytest.approx(ratio)
    assert "probe/grad/first_over_last" not in values  # no stack without a name here


def test_bn_fold_timing_checks_equal_logits():
    pytest.importorskip("zoo.core.bn_fold", reason="the BatchNorm fold (zoo/core/bn_fold.py) is not there yet")
    from zoo.lab.measure.folding import fold_timing
    from zoo.models import ViT

    torch.manual_seed(0)
    net = ViT.from_preset("vit-nano/4", image_size=28, in_channels=1, num_classes=10, norm="batchnorm")
    net.train()
    for _ in range(3):  # running statistics away from their initial (0, 1)
        net(torch.randn(16, 1, 28, 28) * 2 + 0.5)
    images = torch.randn(8, 1, 28, 28)
    values = fold_timing(net, images, repeats=2, warmup=1)
    assert values["lab/fold_max_diff"] <= 1e-5 and values["lab/batchnorms"] > 0
    assert values["lab/infer_ms"] > 0 and values["lab/infer_ms_folded"] > 0
    assert net.training  # the probe put it back, unfolded
    assert any(isinstance(m, nn.BatchNorm1d) for m in net.modules())


def test_bn_fold_measurement_job_on_real_images(data_dir):
    pytest.importorskip("zoo.core.bn_fold", reason="the BatchNorm fold (zoo/core/bn_fold.py) is not there yet")
    from zoo.data import ImageClassificationDataModule
    from zoo.lab.measure.folding import bn_fold
    from zoo.models import ViT

    dm = ImageClassificationDataModule(dataset="mnist", data_dir=str(data_dir), split_sizes=[64, 40, 20])
    dm.setup("fit")
    net = ViT.from_preset("vit-nano/4", **dm.model_fields, norm="batchnorm", ff_inner_norm="batchnorm")
    metrics, record = bn_fold(net, dm, batch_size=20, repeats=1)
    assert record == {"metrics": metrics} and metrics["lab/fold_max_diff"] <= 1e-5
    assert metrics["lab/batchnorms"] == 13  # 4 blocks x (norm1, norm2, FFN-inner) + the final norm


# ---- one job of each image question, as its quick run trains it (train.py, real MNIST; tests/lab_sweeps.py) -------


@pytest.mark.slow
@pytest.mark.lab
def test_bn_vit_job_records_the_fold_the_bn_statistics_the_loss_curve_and_its_fit(tmp_path, data_dir):
    record = quick_job("bn_vit", tmp_path, variant="bn_ffn")
    metrics = record["metrics"]
    assert metrics["lab/fold_max_diff"] <= 1e-5 and metrics["lab/batchnorms"] > 0
    assert metrics["lab/infer_ms"] > 0 and metrics["lab/infer_ms_folded"] > 0
    assert metrics["lab/diverged"] in (0.0, 1.0) and math.isfinite(metrics["lab/loss_start"])
    bn_layers = [k for k in metrics if k.startswith("probe/bn/mean_std/") and k != "probe/bn/mean_std/mean"]
    # vit-nano/4: 4 blocks x (norm1, norm2, FFN-inner) + the final norm, all BatchNorm
    assert len(bn_layers) == 13 and "probe/bn/mean_std/l0.ff.inner_norm" in metrics
    assert all(0 < metrics[k] < 10 for k in bn_layers)
    assert len(record["series"]["train_loss"]) == 3  # 6 steps, every 2
    # the fit read: every one of the 500 training images, so the accuracy is a whole count of them
    assert metrics["lab/train_acc"] == pytest.approx(1 - metrics["lab/train_error"])
    assert round(500 * metrics["lab/train_acc"], 6) == round(500 * metrics["lab/train_acc"])
    # the tuned recipe's settings reached the job: average pooling, Muon, batches of 128
    config = (tmp_path / "config_resolved.yaml").read_text()
    assert "pool: avg" in config and "zoo.optim.muon.MuonWithAdamW" in config and "batch_size: 128" in config


@pytest.mark.slow
@pytest.mark.lab
def test_inductive_bias_cnn_job_trains_on_the_subset_with_its_size_and_fit_recorded(tmp_path, data_dir):
    record = quick_job("inductive_bias", tmp_path, arch="cnn", subset="s500")
    metrics = record["metrics"]
    assert 0 <= metrics["val/acc"] <= 1 and "probe/grad/total@init" in metrics
    assert not any(k.startswith("probe/attn/") for k in metrics)  # the CNN has no attention to probe
    assert metrics["lab/params"] == 146_244  # resnet8 at 22 / 44 / 88 channels, 1 input channel, 10 classes
    assert round(500 * metrics["lab/train_acc"], 6) == round(500 * metrics["lab/train_acc"])  # over the 500 images
    config = (tmp_path / "config_resolved.yaml").read_text()
    assert "zoo.models.CNN.from_preset" in config and "max_train_images: 500" in config


def test_the_parameter_count_counts_a_shared_tensor_once_and_skips_frozen_ones():
    from zoo.lab.probes.param_count import ParameterCountProbe

    class Task(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 4), nn.Linear(4, 2))
            self.net[2].weight = self.net[0].weight  # tied, (3, 4) both: counted once
            self.net[1].bias.requires_grad_(False)

    probe = ParameterCountProbe()
    probe.on_fit_start(None, Task())
    # 12 + 3 (first layer), 12 (second, its 4 bias entries frozen), 2 (the third's own bias)
    assert probe.result_record() == {"metrics": {"lab/params": 29.0}}
