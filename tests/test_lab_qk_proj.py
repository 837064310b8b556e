"""qk_proj's loss checks compare models of the same size: the matched arms, built from the question's own config,
hold within the stated tolerance of separate's parameters, and the loss checks read those arms."""

from __future__ import annotations

import hydra
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from zoo.entry.builders import build_model_config
from zoo.lab.decide.claims import Stat
from zoo.lab.probes.param_count import ParameterCountProbe
from zoo.lab.questions.configs import question

from conftest import ROOT

LAB = question("qk_proj")


def composed(variant: str):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "zoo" / "conf"), version_base="1.3"):
        cfg = compose(config_name="train", overrides=["experiment=lab/qk_proj", f"variant={variant}"])
    GlobalHydra.instance().clear()
    return cfg


def parameters_of(variant: str) -> tuple[int, object]:
    """The job's network as the sweep builds it (the vocabulary from the data), counted by the job's own probe."""
    cfg = composed(variant)
    datamodule = hydra.utils.instantiate(cfg.data, _convert_="all")
    net = hydra.utils.instantiate(build_model_config(cfg.model.net, datamodule), _convert_="all")
    probe = ParameterCountProbe()
    probe.on_fit_start(None, net)
    return int(probe.metrics["lab/params"]), net


def params_checks() -> dict[str, dict]:
    """The sanity checks on lab/params, by the matched arm they compare with separate."""
    checks = [c for c in LAB["checks"] if c["metric"] == "lab/params"]
    return {c["points"][1]["variant"]: c for c in checks if c["points"][0] == {"variant": "separate"}}


def test_the_matched_arms_have_separates_parameters_within_the_stated_tolerance_and_the_plain_ones_do_not():
    separate, net = parameters_of("separate")
    assert net.config.qk_proj == "separate" and net.config.ffn_width() == 4 * net.config.n_embd
    checks = params_checks()
    assert set(checks) == {"shared_matched", "none_matched"}
    for matched, plain in (("shared_matched", "shared"), ("none_matched", "none")):
        count, net = parameters_of(matched)
        assert net.config.qk_proj == LAB["variants"][plain]["qk_proj"] == plain  # the attention under test
        assert net.config.ffn_width() > 4 * net.config.n_embd  # what gives the parameters back
        check = checks[matched]
        assert check["kind"] == "sanity" and check["expect"] == "similar"
        assert abs(count - separate) <= check["tolerance"] * separate, (matched, count, separate)
        # the nearest width: one unit more or less (an input row, its bias, an output column a layer) is further
        step = net.config.n_layer * (2 * net.config.n_embd + 1)
        assert abs(count - separate) <= step / 2
        unmatched, _ = parameters_of(plain)
        assert separate - unmatched > check["tolerance"] * separate  # the plain arm would fail the check


def test_the_loss_checks_compare_separate_with_the_matched_arms_only():
    loss_checks = [c for c in LAB["checks"] if c["metric"] == "val/loss"]
    assert [[p["variant"] for p in c["points"]] for c in loss_checks] == [
        ["separate", "shared_matched"],
        ["separate", "none_matched"],
    ]
    assert all(c["expect"] == "less" for c in loss_checks)
    diagonal = [c for c in LAB["checks"] if c["metric"].startswith("probe/attn/diag_mass")]
    assert {p["variant"] for c in diagonal for p in c["points"]} == {"shared", "none", "separate"}
    assert "lab/params" in LAB["table"]


def test_the_sweep_runs_every_arm_the_checks_name_at_five_seeds():
    swept = OmegaConf.load(ROOT / "zoo" / "conf" / "experiment" / "lab" / "qk_proj.yaml").hydra.sweeper.params
    variants = {v.strip() for v in str(swept["variant"]).split(",")}
    named = {p["variant"] for c in LAB["checks"] for p in c["points"]}
    assert named <= variants == set(LAB["variants"])
    assert len(str(swept["seed"]).split(",")) >= 5


def test_a_parameter_count_shows_in_full_in_the_table():
    """Four significant digits would show 413,184 and 413,312 alike; a count the seeds agree on prints whole."""
    assert str(Stat.of([413_184.0] * 5)) == "413,184 ± 0"
    assert str(Stat.of([413_184] * 5)) == "413,184 ± 0"  # integers, as a JSON record holds a count
    assert str(Stat.of([413_184.0, 413_312.0])) == "4.132e+05 ± 91"  # a spread: measured numbers, four digits
    assert str(Stat.of([1.5] * 5)) == "1.5 ± 0"
