"""The residual questions' pieces measure what they say: the deep MNIST net's shortcut is what changes its function,
the fit-error probe counts mistakes over whole splits, and the token spread reads rank collapse."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from zoo.core import BlockStack
from zoo.lab.probes.fit_error import FitErrorProbe
from zoo.lab.probes.probes import GradNormProbe
from zoo.lab.probes.token_spread import TokenSpreadProbe, measure_token_spread, token_spread
from zoo.lab.questions.configs import question
from zoo.models.deep_mlp import DeepMLP, ResidualBlock


def zero_branch(block: ResidualBlock) -> None:
    # The branch ends in a BatchNorm: a zero scale and shift make F(x) = 0 whatever its weights.
    nn.init.zeros_(block.norm2.weight)
    nn.init.zeros_(block.norm2.bias)


def test_with_the_shortcut_and_a_zero_branch_the_block_is_the_identity_and_without_it_is_not():
    torch.manual_seed(0)
    x = torch.randn(16, 32).relu()  # a block's input is a ReLU's output: non-negative
    residual, plain = ResidualBlock(32, shortcut=True), ResidualBlock(32, shortcut=False)
    plain.load_state_dict(residual.state_dict())
    for block in (residual, plain):
        zero_branch(block)
        block.eval()
    assert torch.equal(residual(x), x)
    assert torch.equal(plain(x), torch.zeros_like(x)) and not torch.allclose(plain(x), x)


def test_the_plain_and_residual_nets_share_every_parameter_and_differ_only_by_the_shortcut():
    torch.manual_seed(0)
    residual = DeepMLP.from_preset("mlp", depth=10, width=32, shortcut=True)
    plain = DeepMLP.from_preset("mlp", depth=10, width=32, shortcut=False)
    assert residual.state_dict().keys() == plain.state_dict().keys()
    plain.load_state_dict(residual.state_dict())
    assert len(residual.layers) == 4  # 10 weight layers: the stem, 4 blocks of 2, the head
    images = torch.randn(8, 1, 28, 28)
    residual.eval(), plain.eval()
    assert not torch.allclose(residual(images), plain(images))
    for net in (residual, plain):
        for block in net.layers:
            zero_branch(block)
    # With every branch zero the residual net is stem -> head; the plain net's blocks output zeros.
    stem_then_head = residual.head(residual.stem(images))
    assert torch.allclose(residual(images), stem_then_head)
    assert torch.allclose(plain(images), plain.head.bias.expand(8, -1))


@pytest.mark.parametrize("depth", [3, 5, 2])
def test_a_depth_that_is_not_stem_blocks_head_is_a_one_line_error(depth):
    with pytest.raises(ValueError, match="depth must be an even number"):
        DeepMLP.from_preset("mlp", depth=depth)


def test_images_of_another_size_are_refused_naming_the_configured_one():
    net = DeepMLP.from_preset("mlp", depth=4, width=8)
    with pytest.raises(ValueError, match=r"\(batch, 1, 28, 28\)"):
        net(torch.zeros(2, 1, 32, 32))


class _Data:
    def __init__(self, train, val):
        self._train, self._val = train, val

    def train_dataloader(self):
        return self._train

    def val_dataloader(self):
        return self._val


class _Task(nn.Module):
    """Predicts the class given as the image's first pixel (so the error is known)."""

    device = torch.device("cpu")

    def forward(self, images):
        return nn.functional.one_hot(images[:, 0, 0, 0].long(), 10).float()


class _Trainer:
    is_global_zero = True
    loggers = ()
    global_step = 0

    def __init__(self, datamodule):
        self.datamodule = datamodule


def test_fit_error_counts_the_mistakes_over_every_batch_of_each_split():
    def batches(pixels, labels, size):
        images = torch.zeros(len(pixels), 1, 2, 2)
        images[:, 0, 0, 0] = torch.tensor(pixels, dtype=torch.float)
        labels = torch.tensor(labels)
        return [(images[i : i + size], labels[i : i + size]) for i in range(0, len(labels), size)]

    train = batches([1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6, 0, 0], 3)  # 2 of 8 wrong, over 3 batches
    val = batches([1, 2, 3, 4], [1, 0, 0, 0], 2)  # 3 of 4 wrong
    probe = FitErrorProbe()
    task = _Task().train()
    probe.on_train_end(_Trainer(_Data(train, val)), task)
    assert probe.result_record() == {"metrics": {"lab/train_error": 0.25, "lab/val_error": 0.75, "lab/train_acc": 0.75}}
    assert task.training  # put back as it was


class _Split(torch.utils.data.Dataset):
    """Images whose first pixel is their label, seen through `transform` (as zoo.data.images' splits are)."""

    def __init__(self, labels, transform):
        self.labels, self.transform = labels, transform

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        image = torch.zeros(1, 2, 2)
        image[0, 0, 0] = self.labels[i]
        return self.transform(image), self.labels[i]


class _ImageData(_Data):
    def __init__(self, train, val):
        super().__init__(torch.utils.data.DataLoader(train, batch_size=3), torch.utils.data.DataLoader(val))
        self.splits = {"train": train, "val": val}

    def train_dataset(self):
        return self.splits["train"]

    def eval_dataset(self, split):
        return self.splits[split]

    def loader_batch_size(self, train):
        return 2


def test_fit_error_without_augmentation_reads_the_training_images_through_the_val_transform():
    def shift(image):  # an "augmentation" that moves every image to another class
        return image + 1

    train, val = _Split([1, 2, 3, 4, 5], shift), _Split([1, 2, 3], lambda image: image)
    augmented, clean = FitErrorProbe(), FitErrorProbe(unaugmented=True)
    for probe in (augmented, clean):
        probe.on_train_end(_Trainer(_ImageData(train, val)), _Task())
    assert augmented.metrics["lab/train_error"] == 1.0  # every augmented image lands on the next class
    assert clean.metrics == {"lab/train_error": 0.0, "lab/val_error": 0.0, "lab/train_acc": 1.0}
    assert train.transform is shift  # the run's own split keeps its augmentation
    with pytest.raises(ValueError, match="carry their transform"):
        FitErrorProbe(unaugmented=True).on_train_end(_Trainer(_Data([], [])), _Task())


def test_token_spread_is_zero_at_rank_collapse_and_near_one_for_unrelated_positions():
    torch.manual_seed(0)
    same = torch.randn(3, 1, 16).expand(3, 10, 16)
    assert token_spread(same) == pytest.approx(0.0, abs=1e-12)
    assert token_spread(torch.randn(4, 64, 256)) == pytest.approx(1.0, abs=0.02)
    # a shared offset of the same size as the positions' own parts: the spread is about 1/sqrt(2)
    mixed = torch.randn(4, 64, 256) + torch.randn(4, 1, 256)
    assert token_spread(mixed) == pytest.approx(2**-0.5, abs=0.05)


class Stack(nn.Module):
    def __init__(self, **block_kwargs):
        super().__init__()
        self.blocks = BlockStack(6, 32, final_norm=False, n_heads=2, d_ff=64, **block_kwargs)

    def forward(self, x):
        return self.blocks(x)


def test_without_the_attention_skip_pure_attention_averages_the_positions_together():
    # Dong et al. 2021 at init: uniform attention averages positions; only the skip path keeps each one's own part.
    torch.manual_seed(0)
    x = torch.randn(4, 32, 32)
    with_skip = measure_token_spread(Stack(), (x, None))
    without = measure_token_spread(Stack(residual_attn=False, residual_ff=False), (x, None))
    assert set(with_skip) == {f"probe/token_spread/l{i}" for i in range(6)} | {"probe/token_spread/mean"}
    assert without["probe/token_spread/l5"] < 0.5 * with_skip["probe/token_spread/l5"]
    assert without["probe/token_spread/l5"] < without["probe/token_spread/l0"]


def test_the_residual_question_sweeps_the_four_skip_arms_and_reads_vanishing_against_a_fraction():
    lab = question("residual")
    assert set(lab["variants"]) == {"both", "no_attn_skip", "no_ffn_skip", "none"}
    vanishing = [c for c in lab["checks"] if c["metric"].startswith("probe/grad/first_over_last")]
    assert vanishing and all(c["expect"] == "below" and c["threshold"] <= 0.01 for c in vanishing)
    # in the plain net itself, not against another arm
    assert all(len(c["points"]) == 1 and c["points"][0]["variant"] == "none" for c in vanishing)


# A residual_mnist job's training and test error, gradient ratio and its lack of attention probes: checked on the
# plain depth-10 job of the question's quick run (tests/test_lab.py, QUICK), which is this job.


def test_the_per_layer_probes_record_their_layers_in_depth_order_at_init_and_last():
    for probe, name, prefix in (
        (TokenSpreadProbe(), "token_spread_by_layer", "probe/token_spread/"),
        (GradNormProbe(), "grad_by_layer", "probe/grad/"),
    ):
        # logged out of depth order, as a dict of hooks may fill it; l10 after l2 (numeric, not text, order)
        probe.history = {
            0: {f"{prefix}l10": 3.0, f"{prefix}l0": 1.0, f"{prefix}l2": 2.0, f"{prefix}mean": 2.0},
            100: {f"{prefix}l2": 5.0, f"{prefix}l0": 4.0, f"{prefix}l10": 6.0},
        }
        record = probe.result_record()
        assert record["series"] == {f"{name}@init": [1.0, 2.0, 3.0], f"{name}@last": [4.0, 5.0, 6.0]}
        assert record["metrics"][f"{prefix}l0@init"] == 1.0 and record["metrics"][f"{prefix}l10@last"] == 6.0
