"""zoo.models.ViT: presets, config validation, position-table resampling, bad input, the BatchNorm variant."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from zoo.core.norms import TokenBatchNorm
from zoo.models import ViT, ViTConfig
from zoo.models.vit import resample_position_table


def tiny(**overrides) -> ViT:
    torch.manual_seed(0)
    config = (
        dict(image_size=16, patch_size=4, in_channels=1, num_classes=5, embed_dim=32, depth=2, num_heads=4, mlp_dim=64)
        | overrides
    )
    return ViT(ViTConfig(**config)).eval()


def images(batch=4, size=16, channels=1, seed=0):
    return torch.randn(batch, channels, size, size, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(
    "name, expected",
    [
        ("vit-ti/16", 5_717_416),
        ("vit-s/16", 22_050_664),
        ("vit-b/16", 86_567_656),
        ("vit-l/16", 304_326_632),
        ("vit-h/14", 632_045_800),
    ],
)
def test_preset_parameter_counts(name, expected):
    """The ImageNet presets (224 px, 1000 classes) have exactly timm's parameter counts."""
    with torch.device("meta"):
        model = ViT.from_preset(name)
    assert model.num_parameters() == expected


@pytest.mark.parametrize("name", ["vit-nano/4", "vit-micro/4", "vit-mini/4"])
def test_cpu_presets_run_on_mnist_and_cifar_shapes(name):
    for size, channels in ((28, 1), (32, 3)):
        model = ViT.from_preset(name, image_size=size, in_channels=channels).eval()
        assert model.pos_emb.weight.shape[0] == 1 + (size // 4) ** 2
        assert model(images(2, size, channels)).shape == (2, 10)


@pytest.mark.parametrize(
    "bad, words",
    [
        (dict(embed_dim=30, num_heads=4), ["embed_dim", "num_heads"]),
        (dict(image_size=18), ["image_size", "patch_size"]),
        (dict(pool="max"), ["pool"]),
        (dict(norm="groupnorm"), ["norm"]),
        (dict(pool="token", class_token=False), ["class_token"]),
        (dict(dropout=1.0), ["dropout"]),
        (dict(num_classes=-1), ["num_classes"]),
    ],
)
def test_bad_configs_name_the_option(bad, words):
    with pytest.raises(ValueError) as err:
        tiny(**bad)
    for word in words:
        assert word in str(err.value)


def test_unknown_preset_and_option():
    with pytest.raises(ValueError, match="vit-b/16"):
        ViT.from_preset("vit-b16")
    with pytest.raises(ValueError, match="hidden_size"):
        ViT.from_preset("vit-nano/4", hidden_size=3)


def test_wrong_image_size_and_channels_are_clear_errors():
    model = tiny()
    with pytest.raises(ValueError, match=r"in_channels=1"):
        model(images(channels=3))
    with pytest.raises(ValueError, match=r"20x20 differs from the model's 16x16"):
        model(images(size=20))
    with pytest.raises(ValueError, match="batch"):
        model(torch.randn(1, 16, 16))


@torch.no_grad()
def test_position_table_resampling_matches_timm():
    """Our bicubic, antialiased resampling equals timm's resample_abs_pos_embed (what its checkpoints assume)."""
    from timm.layers import resample_abs_pos_embed

    table = torch.randn(1 + 7 * 7, 16)
    for new in (4, 7, 12):
        ours = resample_position_table(table, (7, 7), (new, new), num_prefix=1)
        ref = resample_abs_pos_embed(table[None], [new, new], num_prefix_tokens=1)[0]
        torch.testing.assert_close(ours, ref)
        assert torch.equal(ours[0], table[0])  # the class token's position is kept as is


@torch.no_grad()
def test_set_image_size_resamples_and_dynamic_size_agrees():
    """set_image_size(24) builds a 6x6 table; a dynamic-size model evaluated on 24 px images agrees with it, and
    going back to 16 px from the same grid is the identity."""
    fixed, dynamic = tiny(), tiny(dynamic_image_size=True)
    dynamic.load_state_dict(fixed.state_dict())
    x16, x24 = images(size=16), images(size=24)
    before = fixed(x16)
    torch.testing.assert_close(dynamic(x16), before)
    fixed.set_image_size(24)
    assert fixed.config.image_size == 24 and fixed.pos_emb.weight.shape == (1 + 36, 32)
    torch.testing.assert_close(fixed(x24), dynamic(x24))
    with pytest.raises(ValueError, match="16x16 differs"):
        fixed(x16)
    with pytest.raises(ValueError, match="multiple of patch_size"):
        fixed.set_image_size(30)


@torch.no_grad()
def test_avg_pool_without_class_token():
    model = tiny(pool="avg", class_token=False)
    assert model.cls_token is None and model.pos_emb.weight.shape[0] == 16
    tokens = model.forward_features(images())
    assert tokens.shape == (4, 16, 32)
    pooled = model.forward_head(tokens, pre_logits=True)
    torch.testing.assert_close(pooled, model.norm(tokens.mean(1)))


def test_features_only_when_num_classes_is_zero():
    model = tiny(num_classes=0)
    assert isinstance(model.head, nn.Identity) and model(images()).shape == (4, 32)


def test_batchnorm_variant_replaces_every_layernorm_and_trains():
    """BN-ViT (norm and ff_inner_norm batchnorm): no LayerNorm left, a BatchNorm in each FFN; AdamW lowers the loss."""
    model = tiny(norm="batchnorm", ff_inner_norm="batchnorm").train()
    assert not any(isinstance(m, nn.LayerNorm) for m in model.modules())
    for layer in model.blocks.layers:
        assert isinstance(layer.norm1, TokenBatchNorm) and isinstance(layer.ff.inner_norm, TokenBatchNorm)
    assert isinstance(model.norm, TokenBatchNorm)
    x, y = images(32), torch.arange(32) % 5
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(15):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    running = model.blocks.layers[0].ff.inner_norm.running_mean
    assert running.abs().sum() > 0  # batch statistics were tracked
    model.eval()
    assert torch.isfinite(model(images(1))).all()  # eval uses running statistics: batch of one works


@torch.no_grad()
def test_attention_maps_are_row_stochastic_and_leave_the_fast_path():
    model = tiny()
    maps = model.attention_maps(images(2))
    assert len(maps) == 2 and maps[0].shape == (2, 4, 17, 17)
    torch.testing.assert_close(maps[0].sum(-1), torch.ones(2, 4, 17))
    attn = model.blocks.layers[0].self_attn
    assert not attn.record_weights and attn.last_weights is None


def test_layer_index_and_no_weight_decay_names():
    model = tiny()
    names = dict(model.named_parameters())
    assert model.no_weight_decay() <= set(names)
    assert model.layer_index("patch_embed.proj.weight") == 0 and model.layer_index("cls_token") == 0
    assert model.layer_index("blocks.layers.1.ff.fc1.weight") == 2
    assert model.layer_index("head.weight") == model.layer_index("norm.weight") == 3


def test_class_token_shortcut_gives_the_full_models_logits_and_gradients():
    """forward() computes only the class token's row in the last block; logits and gradients equal the head
    applied to the full forward_features."""
    model = tiny().train()
    x = images()

    def run(fast: bool):
        model.zero_grad()
        logits = model(x) if fast else model.forward_head(model.forward_features(x))
        logits.logsumexp(-1).sum().backward()
        return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    (fast, fast_grads), (full, full_grads) = run(True), run(False)
    torch.testing.assert_close(fast, full, atol=1e-5, rtol=1e-5)
    for name, grad in full_grads.items():
        torch.testing.assert_close(fast_grads[name], grad, atol=1e-5, rtol=1e-5, msg=name)
