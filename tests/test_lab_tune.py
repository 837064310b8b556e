"""A learning rate tuned per arm, best against best (zoo/lab/decide/tuning.py): the choice from known numbers (ties,
diverged and missing seeds), the flag at the edge of the grid, one-line errors for a bad `lab.tune`, the report on a
hand-made sweep (every rate in the table, the chosen one marked, the checks on the chosen ones, the tuning plot), and
a job of why_normalize with the report of its quick grid (copies of that job: tests/lab_sweeps.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from lab_sweeps import quick_job, sweep_of_copies
from omegaconf import OmegaConf

from zoo.lab.decide.sweep import load_sweep
from zoo.lab.decide.tuning import EDGE, Tune, choice_text, choices, choose, tune_config
from zoo.lab.report.plots import TUNING_PLOT
from zoo.lab.report.report import DECISION_JSON, write_report

NAN = float("nan")
LOSS = Tune("lr", "m", "min")
JITTER = (0.0, 0.03, -0.02, 0.01, -0.015)  # five seeds' noise, so that paired differences have a spread


def seeds(center: float, jitter=JITTER) -> dict[str, float]:
    return {str(i + 1): center + j for i, j in enumerate(jitter)}


def pick(values: dict[str, dict[str, float]], tune: Tune = LOSS):
    return choose(values, tune, "arm", {rate: (rate,) for rate in values})


def test_the_rate_with_the_best_mean_is_chosen_in_either_mode():
    values = {"0.001": seeds(2.3), "0.003": seeds(2.1), "0.01": seeds(2.2), "0.03": seeds(2.6)}
    choice = pick(values)
    assert choice.chosen.value == "0.003" and choice.chosen.score == pytest.approx(2.1 + sum(JITTER) / 5)
    assert [c.value for c in choice.candidates] == ["0.001", "0.003", "0.01", "0.03"]  # numeric order, not text
    assert not choice.edge and not choice.tie
    assert pick(values, Tune("lr", "m", "max")).chosen.value == "0.03"  # an accuracy: the highest mean wins


def test_a_rate_with_a_diverged_seed_is_worse_than_every_finite_one():
    lowest_but_diverged = {**seeds(1.5), "3": NAN}
    choice = pick({"0.001": seeds(2.3), "0.01": lowest_but_diverged, "0.03": seeds(2.2)})
    assert choice.chosen.value == "0.03"
    assert "0.01: diverged" in choice_text(choice, LOSS)


def test_a_tie_goes_to_the_lower_rate_and_is_said():
    choice = pick({"0.01": seeds(2.0), "0.003": seeds(2.0), "0.03": seeds(2.5)})
    assert choice.chosen.value == "0.003" and choice.tie
    assert "a tie, broken toward the lower lr" in choice_text(choice, LOSS)
    every_one_diverged = pick({"0.01": {"1": NAN}, "0.03": {"1": NAN}})
    assert every_one_diverged.chosen.value == "0.01" and every_one_diverged.tie


def test_rates_are_compared_over_the_seeds_they_all_ran():
    # 0.003 lost seed 5 (its job failed). Over its own four seeds it looks worse than 0.01 over five, because
    # 0.01's seed 5 is very good; over the four seeds both ran, 0.003 is the better rate.
    fast = {"1": 2.00, "2": 2.02, "3": 2.01, "4": 2.03}
    slow = {"1": 2.05, "2": 2.06, "3": 2.04, "4": 2.07, "5": 1.50}
    choice = pick({"0.003": fast, "0.01": slow})
    assert choice.compared_on == ("1", "2", "3", "4")
    assert choice.chosen.value == "0.003"
    assert choice.chosen.seeds == ("1", "2", "3", "4")  # the seeds it has, shown beside the choice
    assert "means over seeds 1, 2, 3, 4" in choice_text(choice, LOSS)
    # a rate without any value of the metric is listed and never chosen; the others still share their seeds
    choice = pick({"0.001": {}, "0.003": fast, "0.01": slow})
    assert choice.chosen.value == "0.003" and choice.candidates[0].score is None
    assert "0.001: no value" in choice_text(choice, LOSS)
    assert pick({"0.001": {}, "0.003": {}}).chosen is None


def test_a_choice_at_either_end_of_the_grid_is_flagged():
    low = pick({"0.001": seeds(2.0), "0.003": seeds(2.1), "0.01": seeds(2.2)})
    high = pick({"0.001": seeds(2.4), "0.003": seeds(2.1), "0.01": seeds(2.0)})
    inside = pick({"0.001": seeds(2.4), "0.003": seeds(2.0), "0.01": seeds(2.2)})
    assert low.edge and high.edge and not inside.edge
    assert EDGE in choice_text(low, LOSS) and EDGE in choice_text(high, LOSS)
    assert EDGE not in choice_text(inside, LOSS)
    single = pick({"0.001": seeds(2.0)})
    assert not single.edge and "one value only: not tuned" in choice_text(single, LOSS)


GOOD = {"param": "lr", "metric": "m", "mode": "min"}


@pytest.mark.parametrize(
    ("tune", "checks", "message"),
    [
        ("lr", [], "lab.tune must be a mapping"),
        ({**GOOD, "metrc": "m"}, [], "unknown key(s) metrc"),
        ({"metric": "m"}, [], "lab.tune.param must name a swept parameter"),
        ({"param": "lr", "metric": ""}, [], "lab.tune.metric must name a metric"),
        ({**GOOD, "mode": "lowest"}, [], "lab.tune.mode must be min or max"),
        ({**GOOD, "show": "val/loss"}, [], "lab.tune.show must be a list of metric names"),
        (GOOD, [{"name": "c", "points": [{"norm": "a", "lr": 0.01}]}], "selects on lr, the tuned parameter"),
    ],
)
def test_a_bad_tune_section_is_a_one_line_error_naming_it(tune, checks, message):
    with pytest.raises(ValueError, match="lab.") as err:
        tune_config({"name": "q", "tune": tune, "checks": checks})
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_good_tune_section_and_a_grid_check_are_accepted():
    grid_check = {"name": "c", "grid": True, "points": [{"norm": "a", "lr": 0.01}]}
    assert tune_config({"tune": {**GOOD, "show": ["v"]}, "checks": [grid_check]}) == Tune("lr", "m", "min", ("v",))
    assert tune_config({"checks": [grid_check]}) is None  # no tune section: nothing tuned


# ---- the report on a hand-made sweep ----------------------------------------------------------------------------


def make_sweep(root: Path, values: dict[tuple[str, str], list[float]], checks: list[dict], tune: dict) -> Path:
    """A sweep folder as a lab multirun leaves it: one job per (norm, lr, seed) with its result.json (a value None:
    that job left no folder)."""
    lab = {
        "name": "handmade",
        "title": "hand-made",
        "claim": "a trains better than b, each at its best rate",
        "mode": "full",
        "table": ["m"],
        "plots": [],
        "checks": checks,
        "tune": tune,
    }
    job = 0
    for (norm, lr), point in values.items():
        for seed, value in enumerate(point, start=1):
            job += 1
            if value is None:
                continue
            folder = root / str(job - 1)
            folder.mkdir(parents=True)
            overrides = [f"norm={norm}", f"lr={lr}", f"seed={seed}"]
            OmegaConf.save(OmegaConf.create({"lab": lab}), folder / "config_resolved.yaml")
            record = {"job": job - 1, "metric": "m", "value": value, "overrides": overrides, "metrics": {"m": value}}
            (folder / "result.json").write_text(json.dumps(record))
    return root


def five(center: float) -> list[float]:
    return [center + j for j in JITTER]


# b is better than a at the shared rate 0.01 but worse at each one's best (a at 0.03, b at 0.001); b diverged at 0.03.
GRID = {
    ("a", "0.001"): five(2.5),
    ("a", "0.01"): five(2.2),
    ("a", "0.03"): five(1.9),
    ("b", "0.001"): five(2.0),
    ("b", "0.01"): five(2.1),
    ("b", "0.03"): [2.0, NAN, 2.1, NAN, 2.2],
}
BEST = {"name": "a < b, each at its best rate", "metric": "m", "expect": "less"}
BEST["points"] = [{"norm": "a"}, {"norm": "b"}]


def test_the_report_compares_best_against_best_and_shows_every_rate(tmp_path):
    root = make_sweep(tmp_path / "sweep", GRID, [BEST], {"param": "lr", "metric": "m"})
    path, outcome, plots = write_report(root)
    text = path.read_text()
    assert outcome == "supported"  # 1.9 (a at 0.03) against 2.0 (b at 0.001); at the shared 0.01, b would win
    assert "**a < b, each at its best rate**: supported" in text
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in text.splitlines() if line.startswith("| 0.0")]
    assert len(rows) == 6  # every rate of both arms in the table (lr, norm, seeds, m, tuned per arm)
    assert [row[:2] for row in rows if row[-1] == "**chosen**"] == [["0.03", "a"], ["0.001", "b"]]
    assert ["0.03", "b", "5", "non-finite", ""] in rows  # b's diverged rate is in the table
    assert "**Tuned per arm** (lab.tune)" in text
    assert "a little optimistic" in text  # chosen on the metric the check compares: the text says what that costs
    assert "norm=a: lr 0.001: 2.501, 0.01: 2.201, **0.03: 1.901** (means over seeds 1, 2, 3, 4, 5)" in text
    assert EDGE in text  # both choices are at an end of the grid
    assert "0.03: diverged" in text  # b's diverged rate is shown, not hidden
    facts = json.loads((path.parent / DECISION_JSON).read_text())
    assert facts["tuned"]["chosen"] == {"norm=a": "0.03", "norm=b": "0.001"}
    assert facts["tuned"]["edge"] == ["norm=a", "norm=b"]
    figure = root / TUNING_PLOT
    assert figure in plots and figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"]({TUNING_PLOT})" in text


def test_a_grid_check_reads_the_named_rates_and_the_choice_ignores_it(tmp_path):
    at_shared_rate = {
        "name": "b < a at 0.01 (on the grid)",
        "grid": True,
        "metric": "m",
        "expect": "less",
        "points": [{"norm": "b", "lr": "0.01"}, {"norm": "a", "lr": "0.01"}],
    }
    root = make_sweep(tmp_path / "sweep", GRID, [BEST, at_shared_rate], {"param": "lr", "metric": "m"})
    _, outcome, _ = write_report(root)
    assert outcome == "supported"  # both hold: best against best a wins, at 0.01 b does
    sweep = load_sweep(root)
    assert [c.chosen.value for c in choices(sweep, Tune("lr", "m"))] == ["0.03", "0.001"]


def test_a_seed_missing_at_one_rate_narrows_that_arms_comparison_to_the_shared_seeds(tmp_path):
    lost = {**GRID, ("a", "0.001"): [*five(2.5)[:4], None]}  # that job never wrote a result
    root = make_sweep(tmp_path / "sweep", lost, [BEST], {"param": "lr", "metric": "m"})
    path, outcome, _ = write_report(root)
    text = path.read_text()
    assert "norm=a: lr 0.001: 2.505, 0.01: 2.205, **0.03: 1.905** (means over seeds 1, 2, 3, 4)" in text
    assert "(means over seeds 1, 2, 3, 4, 5); chosen lr=0.001" in text  # b lost nothing
    assert outcome == "supported"  # the chosen points still have their five seeds each


def test_a_tuned_parameter_the_jobs_do_not_have_is_a_one_line_error(tmp_path):
    root = make_sweep(tmp_path / "sweep", GRID, [BEST], {"param": "model.optimizer.lr", "metric": "m"})
    with pytest.raises(ValueError, match="lab.tune.param model.optimizer.lr is not a parameter of the sweep's jobs"):
        write_report(root)


# ---- the question -----------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.lab
def test_why_normalize_job_records_the_loss_it_is_tuned_on_and_its_quick_grid_tunes_the_rate_per_arm(tmp_path):
    # one real job (tests/lab_sweeps.py), then the quick grid (2 norms x 2 rates x 1 seed) of copies of it
    record = quick_job("why_normalize", tmp_path / "job", **{"model.net.norm": "none", "model.optimizer.lr": "0.01"})
    # the metric the rate is chosen on, and the probes, were recorded
    assert math.isfinite(record["metrics"]["lab/loss_end"]) and "probe/act_rms/mean@last" in record["metrics"]
    sweep = sweep_of_copies(tmp_path / "job", tmp_path / "why_normalize")
    _, _, plots = write_report(sweep)
    report = (sweep / "report.md").read_text()
    assert "Quick run" in report and "### Verdict: " in report
    assert "**Tuned per arm** (lab.tune): lr is chosen" in report
    assert report.count("| **chosen** |") == 2  # one rate per arm: LayerNorm and none
    assert sweep / TUNING_PLOT in plots and (sweep / TUNING_PLOT).read_bytes()[:4] == b"\x89PNG"
    results = [json.loads(p.read_text(), parse_constant=float) for p in sweep.glob("*/result.json")]
    assert len(results) == 4  # 2 norms x 2 rates x 1 seed
