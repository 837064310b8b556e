"""zoo.interop for ViT: timm, torchvision and Hugging Face weights give the same logits in zoo's ViT."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from zoo.interop import load_hf, load_vit, save_hf
from zoo.interop.vit import from_timm_state_dict, from_torchvision_state_dict
from zoo.models import ViT

timm = pytest.importorskip("timm")
TOL = dict(atol=1e-5, rtol=1e-5)


def images(batch: int = 3, size: int = 32, channels: int = 3, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, channels, size, size, generator=torch.Generator().manual_seed(seed))


def randomize(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Random values for every tensor (norm scales and biases too), so that a mixed-up name cannot hide."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return model.eval()


def timm_vit(**kw):
    from timm.models.vision_transformer import VisionTransformer

    args = (
        dict(img_size=32, patch_size=4, in_chans=3, num_classes=7, embed_dim=48, depth=2, num_heads=4, mlp_ratio=2.0)
        | kw
    )
    return randomize(VisionTransformer(**args))


@pytest.mark.parametrize("pool", ["token", "avg"])
@pytest.mark.parametrize("suffix", [".safetensors", ".pth"])
@torch.no_grad()
def test_timm_file_matches_timm_logits(tmp_path, pool, suffix):
    """A timm VisionTransformer's state dict, saved as a file and read by load_vit, gives timm's logits."""
    ref = timm_vit(global_pool=pool)
    path = tmp_path / f"vit{suffix}"
    sd = {k: v.contiguous() for k, v in ref.state_dict().items()}
    save_file(sd, path) if suffix == ".safetensors" else torch.save({"state_dict": sd}, path)
    ours = load_vit(path, num_heads=4)
    assert isinstance(ours, ViT) and not ours.training
    assert ours.config.pool == pool and ours.config.image_size == 32 and ours.config.num_classes == 7
    x = images()
    torch.testing.assert_close(ours(x), ref(x), **TOL)
    torch.testing.assert_close(
        ours.forward_head(ours.forward_features(x), pre_logits=True),
        ref.forward_head(ref.forward_features(x), pre_logits=True),
        **TOL,
    )


@torch.no_grad()
def test_timm_without_class_token_avg_pool():
    ref = timm_vit(class_token=False, global_pool="avg")
    ours = from_timm_state_dict(ref.state_dict(), num_heads=4)
    assert not ours.config.class_token
    x = images()
    torch.testing.assert_close(ours(x), ref(x), **TOL)


@torch.no_grad()
def test_torchvision_matches_logits(tmp_path):
    """torchvision's VisionTransformer (grayscale, 28 px) read from a .pth file gives the same logits."""
    from torchvision.models.vision_transformer import VisionTransformer

    ref = VisionTransformer(
        image_size=28, patch_size=4, num_layers=2, num_heads=3, hidden_dim=48, mlp_dim=96, num_classes=10
    )
    # torchvision's ViT is RGB-only: make it grayscale by swapping its patch convolution.
    ref.conv_proj = torch.nn.Conv2d(1, 48, kernel_size=4, stride=4)
    randomize(ref)
    torch.save(ref.state_dict(), tmp_path / "tv.pth")
    ours = load_vit(tmp_path / "tv.pth", num_heads=3)
    assert (ours.config.in_channels, ours.config.image_size, ours.config.depth) == (1, 28, 2)
    x = images(size=28, channels=1)
    torch.testing.assert_close(ours(x), ref(x), **TOL)


@torch.no_grad()
def test_hf_directory_matches_logits_and_round_trips(tmp_path):
    """ViTForImageClassification saved with save_pretrained loads through load_hf; save_hf writes a directory
    transformers reads back to the same logits."""
    transformers = pytest.importorskip("transformers")
    config = transformers.ViTConfig(
        hidden_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=96,
        image_size=32,
        patch_size=4,
        num_channels=3,
        num_labels=5,
    )
    ref = randomize(transformers.ViTForImageClassification(config))
    ref.save_pretrained(tmp_path / "hf")
    ours = load_hf(tmp_path / "hf")
    assert isinstance(ours, ViT) and ours.config.norm_eps == 1e-12
    x = images()
    expected = ref(pixel_values=x).logits
    torch.testing.assert_close(ours(x), expected, **TOL)
    torch.testing.assert_close(load_vit(tmp_path / "hf")(x), expected, **TOL)

    save_hf(ours, tmp_path / "back")
    back = transformers.ViTForImageClassification.from_pretrained(tmp_path / "back").eval()
    torch.testing.assert_close(back(pixel_values=x).logits, expected, **TOL)


@torch.no_grad()
def test_resolution_change_on_load_matches_timm_resampling():
    """Loading at another image size resamples the position table as timm does (bicubic, antialiased), so the
    model equals a timm model evaluated dynamically at that size."""
    ref = timm_vit(dynamic_img_size=True)
    ours = from_timm_state_dict(ref.state_dict(), num_heads=4, image_size=48)
    assert ours.config.image_size == 48 and ours.pos_emb.weight.shape[0] == 1 + 12 * 12
    x = images(size=48)
    torch.testing.assert_close(ours(x), ref(x), **TOL)


def test_published_widths_need_no_head_count(tmp_path):
    """Without num_heads the published ViT widths are recognized (vit-ti width 192 -> 3 heads); others fail."""
    ref = timm_vit(embed_dim=192, num_heads=3, depth=1)
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, tmp_path / "ti.safetensors")
    assert load_vit(tmp_path / "ti.safetensors").config.num_heads == 3
    save_file({k: v.contiguous() for k, v in timm_vit().state_dict().items()}, tmp_path / "odd.safetensors")
    with pytest.raises(ValueError, match="num_heads"):
        load_vit(tmp_path / "odd.safetensors")


@torch.no_grad()
def test_timm_hub_directory_reads_heads_from_architecture(tmp_path):
    """A timm hub folder (config.json with "architecture" + model.safetensors): "small" means 6 heads."""
    ref = timm_vit(embed_dim=96, num_heads=6)
    (tmp_path / "config.json").write_text(json.dumps({"architecture": "vit_small_patch4_32", "num_classes": 7}))
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, tmp_path / "model.safetensors")
    ours = load_vit(tmp_path)
    assert ours.config.num_heads == 6
    x = images()
    torch.testing.assert_close(ours(x), ref(x), **TOL)


def test_unsupported_timm_features_are_named():
    """LayerScale weights (ls1.gamma) are refused with their names rather than silently dropped."""
    ref = timm_vit(init_values=1e-5)
    with pytest.raises(ValueError, match="ls1"):
        from_timm_state_dict(ref.state_dict(), num_heads=4)


def test_bad_paths_and_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        load_vit(tmp_path / "missing.safetensors")
    (tmp_path / "x.txt").write_text("hello")
    with pytest.raises(ValueError, match="unknown weight file type"):
        load_vit(tmp_path / "x.txt")
    torch.save({"w": torch.zeros(2)}, tmp_path / "other.pth")
    with pytest.raises(ValueError, match="does not look like"):
        load_vit(tmp_path / "other.pth")


def test_torchvision_pre_logits_refused():
    from torchvision.models.vision_transformer import VisionTransformer

    ref = VisionTransformer(
        image_size=16,
        patch_size=4,
        num_layers=1,
        num_heads=2,
        hidden_dim=16,
        mlp_dim=32,
        num_classes=3,
        representation_size=8,
    )
    with pytest.raises(ValueError, match="representation_size"):
        from_torchvision_state_dict(ref.state_dict(), num_heads=2)
