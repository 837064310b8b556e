"""The paper's numbers beside the lab's (zoo/lab/report/paper_overlay.py) on a hand-made sweep (no training): the
normalisation on numbers worked out by hand, the plot written by the report's plotting, bad sections refused in one
line that names the key, and a question without the key unchanged."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from test_lab_integrity import make_sweep

from zoo.lab.decide.sweep import Job, Sweep
from zoo.lab.questions.configs import question
from zoo.lab.report.paper_overlay import (
    OVERLAY_PLOT,
    lab_series,
    normalised,
    overlay_config,
    paper_series,
    plot_overlay,
)
from zoo.lab.report.plots import write_plots
from zoo.lab.report.report import write_report

# He et al. 2016 Table 2 (ImageNet top-1 error, %): plain 18 / 34 layers, ResNet 18 / 34 layers
HE = [
    {"x": 18, "series": False, "value": 27.94},
    {"x": 34, "series": False, "value": 28.54},
    {"x": 18, "series": True, "value": 27.88},
    {"x": 34, "series": True, "value": 25.03},
]
OVERLAY = {
    "source": "He et al. 2016, Table 2",
    "x": "depth",
    "series": "shortcut",
    "metric": "err",
    "normalise": "ratio",
    "points": HE,
}
# the lab's error per (shortcut, depth): one value per seed
ERRORS = {
    ("false", "4"): [0.10, 0.20, 0.10],
    ("false", "40"): [0.15, 0.20, 0.30],
    ("true", "4"): [0.10, 0.10, 0.20],
    ("true", "40"): [0.05, 0.10, 0.10],
}


def hand_made_sweep(directory: Path, overlay) -> Sweep:
    lab = {"name": "handmade", "paper_overlay": overlay, "plots": []}
    points, members, jobs = {}, {}, []
    for (shortcut, depth), values in ERRORS.items():
        key = (shortcut, depth)
        points[key] = {"shortcut": shortcut, "depth": depth}
        members[key] = [
            Job(
                directory / f"{shortcut}{depth}_{s}",
                {"shortcut": shortcut, "depth": depth, "seed": str(s)},
                {"err": v},
                {},
                1.0,
            )
            for s, v in enumerate(values, start=1)
        ]
        jobs += members[key]
    return Sweep(directory, lab, jobs, ["shortcut", "depth"], points, members)


def test_normalisation_divides_or_subtracts_the_reference_value():
    assert normalised({18: 27.94, 34: 28.54}, "ratio", "first") == pytest.approx({18: 1.0, 34: 28.54 / 27.94})
    assert normalised({18: 27.88, 34: 25.03}, "difference", "first") == pytest.approx({18: 0.0, 34: -2.85})
    assert normalised({1: 5.0, 8: 4.0, 16: 6.0}, "ratio", 8.0) == pytest.approx({1: 1.25, 8: 1.0, 16: 1.5})


def test_the_papers_points_are_normalised_per_series_and_on_the_stated_scale():
    [overlay] = overlay_config({"paper_overlay": OVERLAY})
    paper = paper_series(overlay)
    assert paper["false"][34] == pytest.approx(1.0215, abs=1e-4)  # the plain net degrades: 28.54 / 27.94
    assert paper["true"][34] == pytest.approx(0.8978, abs=1e-4)  # the residual net gains: 25.03 / 27.88
    # perplexities on a log scale: differences of log perplexity are differences of loss in nats
    ppl = {**OVERLAY, "series": None, "normalise": "difference", "paper_scale": "log"}
    ppl["points"] = [{"x": 1, "value": 5.29}, {"x": 8, "value": 4.92}]
    [overlay] = overlay_config({"paper_overlay": ppl})
    assert paper_series(overlay)[""][8] == pytest.approx(math.log(4.92) - math.log(5.29))


def test_the_lab_is_normalised_seed_by_seed_against_the_same_seed(tmp_path):
    sweep = hand_made_sweep(tmp_path, OVERLAY)
    [overlay] = overlay_config(sweep.lab)
    lab = lab_series(sweep, overlay)
    plain = lab["false"][40.0]
    assert plain.values == pytest.approx([1.5, 1.0, 3.0])  # 0.15/0.10, 0.20/0.20, 0.30/0.10
    assert plain.mean == pytest.approx(11 / 6)  # not the ratio of the means (0.65/0.40)
    assert lab["false"][4.0].values == [1.0, 1.0, 1.0]  # the reference point is 1 on every seed
    assert lab["true"][40.0].values == pytest.approx([0.5, 1.0, 0.5])


def test_the_overlay_plot_is_written_beside_the_others_and_only_when_asked(tmp_path):
    sweep = hand_made_sweep(tmp_path, OVERLAY)
    written = write_plots(sweep)
    figure = tmp_path / OVERLAY_PLOT.format("")
    assert written == [figure] and figure.read_bytes()[:4] == b"\x89PNG"
    two = hand_made_sweep(tmp_path / "two", [OVERLAY, {**OVERLAY, "normalise": "difference"}])
    (tmp_path / "two").mkdir()
    assert [p.name for p in write_plots(two)] == ["lab_paper_overlay.png", "lab_paper_overlay_2.png"]
    without = hand_made_sweep(tmp_path / "none", None)
    without.lab.pop("paper_overlay")
    assert write_plots(without) == []  # a question without the key draws what it drew before


@pytest.mark.parametrize(
    "change, words",
    [
        ({"normalise": "log"}, "lab.paper_overlay.normalise must be one of ratio, difference"),
        ({"source": ""}, "lab.paper_overlay.source must be a non-empty string"),
        ({"points": HE[:1]}, "lab.paper_overlay.points must list at least 2"),
        ({"points": [{"x": 18, "value": 1.0}, *HE[1:]]}, "lab.paper_overlay.points[0] needs a series value"),
        ({"points": [*HE[:3], {"x": 34, "series": True, "value": "25"}]}, "points[3].value must be a finite number"),
        ({"reference": 50}, "lab.paper_overlay.reference 50 is not an x of the paper's series"),
        ({"paper_scale": "sqrt"}, "lab.paper_overlay.paper_scale must be one of linear, log"),
        ({"colour": "red"}, "lab.paper_overlay: unknown key(s) colour"),
    ],
)
def test_a_bad_section_is_refused_in_one_line_naming_the_key(change, words):
    with pytest.raises(ValueError) as err:
        overlay_config({"paper_overlay": {**OVERLAY, **change}})
    assert words in str(err.value) and "\n" not in str(err.value)


def test_the_shipped_overlays_are_valid_and_name_their_source():
    for name in ("residual_mnist", "heads", "heads_multi30k", "positions", "activation"):
        overlays = overlay_config(question(name))
        assert overlays and all("Table" in o.source or "Figure" in o.source for o in overlays)


def test_the_report_links_the_overlay_of_a_question_that_has_one(tmp_path):
    root = make_sweep(tmp_path / "sweep", {"1": [2.0, 2.1, 2.05, 2.0, 2.2], "4": [1.9, 2.0, 1.9, 1.95, 2.1]}, [])
    heads = {"source": "Vaswani et al. 2017, Table 3 (A)", "x": "p", "metric": "m", "normalise": "difference"}
    heads.update(reference=1, paper_scale="log", points=[{"x": 1, "value": 5.29}, {"x": 4, "value": 5.00}])
    for config in root.glob("*/config_resolved.yaml"):  # the lab section the report reads, now with an overlay
        lab = OmegaConf.to_container(OmegaConf.load(config))["lab"]
        OmegaConf.save(OmegaConf.create({"lab": {**lab, "paper_overlay": heads}}), config)
    path, _, plots = write_report(root)
    assert root / OVERLAY_PLOT.format("") in plots
    assert f"]({OVERLAY_PLOT.format('')})" in path.read_text()


def test_two_points_at_one_x_of_one_series_are_refused_not_overwritten(tmp_path):
    # Without `series` the plain and the residual net both sit at depth 4: which one the overlay shows is unknown.
    sweep = hand_made_sweep(tmp_path, {**OVERLAY, "series": None})
    [overlay] = overlay_config(sweep.lab)
    with pytest.raises(ValueError, match="two points of the sweep at depth=4.*name the other swept parameter"):
        lab_series(sweep, overlay)


def sweep_of(directory: Path, lab: dict, rows: dict[tuple, list[dict]], names: list[str]) -> Sweep:
    """A sweep of points named by `names` (row key: their values), each with one metrics dict per seed."""
    points, members, jobs = {}, {}, []
    for key, per_seed in rows.items():
        params = dict(zip(names, key))
        points[key] = params
        members[key] = [
            Job(directory / f"{'_'.join(key)}_{s}", {**params, "seed": str(s)}, metrics, {}, 1.0)
            for s, metrics in enumerate(per_seed, start=1)
        ]
        jobs += members[key]
    return Sweep(directory, {"name": "handmade", "plots": [], **lab}, jobs, names, points, members)


# Shazeer 2020 Table 1 at 65,536 steps: a categorical x (the activation), GELU minus ReLU
SHAZEER = {
    "source": "Shazeer 2020, Table 1",
    "x": "activation",
    "metric": "loss",
    "normalise": "difference",
    "reference": "relu",
    "points": [{"x": "relu", "value": 1.997}, {"x": "gelu", "value": 1.983}],
}
ACTIVATION_LOSS = {
    ("relu",): [{"loss": 2.0}, {"loss": 2.2}, {"loss": 2.1}],
    ("gelu",): [{"loss": 1.9}, {"loss": 2.3}, {"loss": 2.0}],
    ("silu",): [{"loss": 1.0}, {"loss": 1.0}, {"loss": 1.0}],  # swept, but not a category the paper names
}


def test_a_categorical_x_is_normalised_against_the_named_category_seed_by_seed(tmp_path):
    sweep = sweep_of(tmp_path, {"paper_overlay": SHAZEER}, ACTIVATION_LOSS, ["activation"])
    [overlay] = overlay_config(sweep.lab)
    assert overlay.categorical and overlay.categories() == ["relu", "gelu"]
    assert paper_series(overlay)[""] == pytest.approx({"relu": 0.0, "gelu": -0.014})
    lab = lab_series(sweep, overlay)[""]
    assert list(lab) == ["relu", "gelu"]  # the paper's order; silu, which the paper does not name, is not drawn
    assert lab["gelu"].values == pytest.approx([-0.1, 0.1, -0.1])  # 1.9-2.0, 2.3-2.2, 2.0-2.1
    assert plot_overlay(sweep, overlay, tmp_path / "cat.png").read_bytes()[:4] == b"\x89PNG"


def test_a_metric_per_x_gives_each_model_one_value_per_evaluation_length(tmp_path):
    # Press et al.'s curve: each model measured at 1x and 2x its training length, one series per position method
    press = {
        "source": "Press et al. 2022, Table 3",
        "x": "evaluation length / training length",
        "metric": {1: "loss@1x", "2": "loss@2x"},  # YAML may keep a key as a string
        "series": "variant",
        "normalise": "difference",
        "reference": 1,
        "paper_scale": "log",
        "points": [
            {"x": 1, "series": "alibi", "value": 18.66},
            {"x": 1.977, "series": "alibi", "value": 18.05},
            {"x": 1, "series": "sinusoidal", "value": 19.34},
            {"x": 1.977, "series": "sinusoidal", "value": 51.09},
        ],
    }
    rows = {
        ("alibi",): [{"loss@1x": 1.5, "loss@2x": 1.4}, {"loss@1x": 1.6, "loss@2x": 1.3}],
        ("sinusoidal",): [{"loss@1x": 1.5, "loss@2x": 2.5}, {"loss@1x": 1.4, "loss@2x": 2.0}],
    }
    sweep = sweep_of(tmp_path, {"paper_overlay": press}, rows, ["variant"])
    [overlay] = overlay_config(sweep.lab)
    assert overlay.metric == {1.0: "loss@1x", 2.0: "loss@2x"}
    lab = lab_series(sweep, overlay)
    assert lab["alibi"][2.0].values == pytest.approx([-0.1, -0.3])
    assert lab["sinusoidal"][2.0].values == pytest.approx([1.0, 0.6])
    assert lab["sinusoidal"][1.0].values == [0.0, 0.0]
    assert paper_series(overlay)["sinusoidal"][1.977] == pytest.approx(math.log(51.09 / 19.34))
    assert plot_overlay(sweep, overlay, tmp_path / "press.png").read_bytes()[:4] == b"\x89PNG"


def test_an_overlay_tied_to_a_budget_is_drawn_by_that_budgets_sweep_only(tmp_path):
    short, long = {**SHAZEER, "budget": "steps750"}, {**SHAZEER, "budget": "steps1500"}
    untied = {**SHAZEER, "source": "drawn at every budget"}
    for budget, expected in (
        ("steps750", ["lab_paper_overlay.png", "lab_paper_overlay_3.png"]),
        ("steps1500", ["lab_paper_overlay_2.png", "lab_paper_overlay_3.png"]),
    ):
        (tmp_path / budget).mkdir()
        lab = {"paper_overlay": [short, long, untied], "budget": budget}
        sweep = sweep_of(tmp_path / budget, lab, ACTIVATION_LOSS, ["activation"])
        assert [p.name for p in write_plots(sweep)] == expected


@pytest.mark.parametrize(
    "change, words",
    [
        ({"reference": "first"}, "a categorical x (the points' x are words) needs its reference named"),
        ({"reference": "silu"}, "lab.paper_overlay.reference silu is not an x of the paper's series"),
        ({"logx": True}, "needs its reference named (reference: one of the points' x), one metric and no logx"),
        ({"budget": 750}, "lab.paper_overlay.budget must name one of the question's budgets"),
        ({"x": "n", "reference": 1, "points": HE[:2], "metric": {"one": "a", 2: "b"}}, "'one' is not a number"),
        ({"x": "n", "reference": 1, "points": HE[:2], "metric": {1: "a"}}, "must map at least 2 x values"),
    ],
)
def test_a_bad_categorical_budget_or_metric_map_is_refused_in_one_line(change, words):
    with pytest.raises(ValueError) as err:
        overlay_config({"paper_overlay": {**SHAZEER, **change}})
    assert words in str(err.value) and "\n" not in str(err.value)
