"""benchmarks/end_to_end.py: the fast MNIST recipe trained end to end with zoo's ViT and timm's, at tiny sizes (a
check that it runs and reports what it trained, not a measurement). Reads MNIST from the data directory or the
fixtures (the tiny split takes 500 of the images either holds)."""

from __future__ import annotations

import json
import statistics

import hydra
import pytest
import torch
from timm.layers import LayerNorm

from benchmarks import end_to_end

STEPS = 5
TINY = dict(embed_dim=32, depth=2, mlp_dim=64, classes=10, channels=1, patch=4, grid=7)


def tiny_parameter_count() -> int:
    """The tiny recipe's ViT counted by hand: patch embedding, position table, blocks (two LayerNorms, qkv,
    projection, the two per-head QK-norm scales, two feed-forward layers), the norm after the pooling, the head."""
    d, ff, head_dim = TINY["embed_dim"], TINY["mlp_dim"], TINY["embed_dim"] // 2
    patch = TINY["channels"] * TINY["patch"] ** 2 * d + d
    block = 2 * 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + 2 * head_dim + (d * ff + ff) + (ff * d + d)
    return patch + TINY["grid"] ** 2 * d + TINY["depth"] * block + 2 * d + d * TINY["classes"] + TINY["classes"]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    path = tmp_path_factory.mktemp("end-to-end") / "e2e.json"
    threads = torch.get_num_threads()
    argv = ["--tiny", "--steps", str(STEPS), "--repeats", "2", "--order", "timm,zoo", "--json", str(path)]
    returned = end_to_end.main(argv)
    return returned, json.loads(path.read_text()), threads


def test_both_models_train_the_same_steps_with_the_same_optimizer_groups(tiny_run):
    returned, written, _ = tiny_run
    assert written == json.loads(json.dumps(returned))
    runs = written["runs"]
    # Two repeats, the order alternating: timm, zoo, then zoo, timm.
    assert [(r["repeat"], r["model"]) for r in runs] == [(0, "timm"), (0, "zoo"), (1, "zoo"), (1, "timm")]
    networks = {r["model"]: r["network"] for r in runs}
    assert networks == {"zoo": "zoo.models.vit.ViT", "timm": "timm.models.vision_transformer.VisionTransformer"}
    for run in runs:
        assert run["steps"] == run["steps_clocked"] == STEPS == written["steps"]
        assert run["untimed_steps"] + run["timed_steps"] == STEPS and run["untimed_steps"] >= 1
        assert 0 < run["fit_s"] <= run["run_s"] and run["fit_cpu_s"] > 0
        # steps/s: the steps after the untimed ones over the time from the end of the last untimed step
        assert len(run["step_s"]) == STEPS - 1
        after = run["step_s"][run["untimed_steps"] - 1 :]
        assert run["steps_per_s"] == pytest.approx(run["timed_steps"] / sum(after), rel=1e-3)
        assert 0.0 <= run["test_acc"] <= 1.0
        # The optimizer the trainer stepped has the groups checked before training, for both networks.
        assert run["optimizer_groups"] == written["optimizer_groups"]
    # The same batches, with the same augmentation draws, for both networks and in either order.
    assert written["same_data"] and len({r["data_checksum"] for r in runs}) == 1
    assert written["parameters"] == {"zoo": tiny_parameter_count(), "timm": tiny_parameter_count()}
    assert written["optimizer"] == "MuonWithAdamW"
    groups = written["optimizer_groups"]
    d, ff = TINY["embed_dim"], TINY["mlp_dim"]
    # Muon takes the four block matrices of each block, in both networks; AdamW everything else.
    assert sorted(written["optimizer_groups"]["muon_shapes"]) == sorted([[3 * d, d], [d, d], [ff, d], [d, ff]] * 2)
    muon = sum(g["parameters"] for g in groups["muon"])
    adamw = sum(g["parameters"] for g in groups["adamw"])
    assert muon + adamw == tiny_parameter_count()


def test_the_report_is_consistent_with_its_runs(tiny_run):
    _, written, threads = tiny_run
    summary = written["summary"]
    for which in ("zoo", "timm"):
        mine = [r for r in written["runs"] if r["model"] == which]
        assert summary[which]["fit_s"] == statistics.median(r["fit_s"] for r in mine)
        assert summary[which]["test_acc"] == statistics.median(r["test_acc"] for r in mine)
    assert summary["fit_ratio_zoo_over_timm"] == summary["zoo"]["fit_s"] / summary["timm"]["fit_s"]
    assert summary["run_ratio_zoo_over_timm"] == summary["zoo"]["run_s"] / summary["timm"]["run_s"]
    # timm ran in the setting the probe found fastest, and says so.
    probe = written["step_probe_s"]
    assert set(probe) == {"zoo", "timm-fused", "timm-unfused"}
    assert written["timm_fused"] == (probe["timm-fused"] <= probe["timm-unfused"])
    assert written["timm_attention"].startswith(f"fused_attn={written['timm_fused']} ")
    machine = written["machine"]
    assert machine["cpu"] and machine["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert machine["torch"] == torch.__version__ and machine["threads"] == 1  # --tiny runs on one thread
    assert torch.get_num_threads() == threads  # and gives the process its threads back
    assert written["precision"] == "bf16-mixed" and written["tiny"] is True
    assert "--tiny" in written["command"] and written["command"].startswith("python -m benchmarks.end_to_end")


def test_a_timm_model_of_another_size_is_refused_before_training(tmp_path, monkeypatch):
    """timm's own qk_norm (a LayerNorm with biases) in place of the RMSNorm: more parameters, refused."""
    cfg = end_to_end.recipe_config(tmp_path, steps=None, tiny=True)
    datamodule = hydra.utils.instantiate(cfg.data, _convert_="all")
    built = end_to_end.timm_network

    def with_layernorm_qk(zoo_net, fused):
        model = built(zoo_net, fused)
        for block in model.blocks:
            block.attn.q_norm, block.attn.k_norm = LayerNorm(block.attn.head_dim), LayerNorm(block.attn.head_dim)
        return model

    monkeypatch.setattr(end_to_end, "timm_network", with_layernorm_qk)
    with pytest.raises(ValueError, match=r"^zoo's ViT has 19,658 parameters and timm's 19,722: not the same") as info:
        end_to_end.check_same_model(cfg, datamodule)
    assert "\n" not in str(info.value)


def test_a_zoo_switch_timm_lacks_and_bad_arguments_are_refused(capsys):
    from zoo.models import ViT, ViTConfig

    net = ViT(ViTConfig(image_size=8, patch_size=4, embed_dim=8, depth=1, num_heads=2, mlp_dim=8, activation="relu"))
    with pytest.raises(ValueError, match=r"no counterpart of zoo's switches \{'activation': 'relu'\}"):
        end_to_end.timm_network(net, fused=True)
    for argv, message in (
        (["--order", "zoo,zoo"], "--order must name zoo and timm once each"),
        (["--steps", "1"], "--steps must be at least 2"),
        (["--repeats", "0"], "--repeats must be at least 1"),
    ):
        with pytest.raises(SystemExit):
            end_to_end.parse_args(argv)
        assert message in capsys.readouterr().err
