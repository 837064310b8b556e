"""Timings measured the way the benchmark measures (zoo/lab/measure/timing.py): arms interleaved in one process in a
rotated order, median and spread per arm; a contended timing decides no check, a clear quiet one does; window_cost times
its arms in one job and the report reads each arm as a point."""

from __future__ import annotations

import json

import pytest
from lab_sweeps import quick_job, sweep_of_copies
from test_lab import assert_lab_report

from zoo.lab.decide.claims import decide, evaluate
from zoo.lab.measure import timing
from zoo.lab.report.report import write_report


class FakeClock:
    """A clock that moves only when an arm says how long it took: timings without sleeping, exactly known."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def arm(self, name: str, costs: list[float], calls: list[str]):
        """An arm whose k-th call takes costs[k] seconds (and is logged in `calls`)."""
        left = iter(costs)

        def run() -> None:
            calls.append(name)
            self.now += next(left)

        return run


def test_every_arm_runs_every_round_in_a_rotated_order():
    clock, calls = FakeClock(), []
    arms = {name: clock.arm(name, [1.0] * 4, calls) for name in "abc"}
    timing.interleave(arms, rounds=3, warmup=1, clock=clock)
    rounds = [calls[i : i + 3] for i in range(0, len(calls), 3)]
    assert rounds == [list("abc"), list("bca"), list("cab"), list("abc")]  # the first round is the warm-up


def test_median_and_spread_of_known_times_warm_up_dropped():
    clock, calls = FakeClock(), []
    arms = {
        "steady": clock.arm("steady", [9.0, 10, 11, 12, 13, 14], calls),  # the warm-up's 9 is dropped
        "one_outlier": clock.arm("one_outlier", [50.0, 10, 10, 10, 10, 100], calls),
        "shared": clock.arm("shared", [1.0, 10, 30, 10, 30, 20], calls),
    }
    found = timing.interleave(arms, rounds=5, warmup=1, clock=clock)
    assert found["steady"].times == (10, 11, 12, 13, 14)
    assert found["steady"].median == 12 and found["steady"].spread == pytest.approx(2 / 12)
    assert not found["steady"].contended
    # the interquartile range ignores one slow call: a median with a robust spread, not a mean with a variance
    assert found["one_outlier"].median == 10 and found["one_outlier"].spread == 0
    assert found["shared"].spread == pytest.approx(1.0) and found["shared"].contended  # 20 ms wide around 20 ms
    assert found["shared"].metrics("t") == {"t": 20000.0, "t/spread": 1.0, "t/contended": 1.0, "t/spread_limit": 0.25}


def test_repeats_time_each_call_and_sync_brackets_every_reading():
    clock, calls, synced = FakeClock(), [], []
    arms = {"a": clock.arm("a", [1.0] * 6, calls), "b": clock.arm("b", [2.0] * 6, calls)}
    found = timing.interleave(arms, rounds=2, warmup=1, repeats=2, clock=clock, sync=lambda: synced.append(1))
    assert calls == ["a", "a", "b", "b", "b", "b", "a", "a", "a", "a", "b", "b"]
    assert found["a"].times == (1.0,) * 4 and found["b"].times == (2.0,) * 4
    assert len(synced) == 2 * len(calls)
    with pytest.raises(ValueError, match="rounds"):
        timing.interleave(arms, rounds=0)


# ---- checks on timings ------------------------------------------------------------------------------------------

FAST, SLOW = [10.0, 10.2, 9.9, 10.1, 10.0], [30.0, 30.5, 29.8, 30.2, 30.1]
CHECK = {"name": "a is faster", "metric": "t", "expect": "less", "factor": 2, "points": [{"p": "a"}, {"p": "b"}]}


def samples(contended_seed: int | None = None) -> dict:
    """Two points, five seeds each, a 3x difference; optionally one seed of `a` timed while the machine was busy."""
    out = {}
    for point, values in (("a", FAST), ("b", SLOW)):
        metrics = {"t": {}, "t/spread": {}, "t/contended": {}, "t/spread_limit": {}}
        for seed, v in enumerate(values):
            busy = point == "a" and seed == contended_seed
            metrics["t"][seed] = v
            metrics["t/spread"][seed] = 0.9 if busy else 0.03
            metrics["t/contended"][seed] = float(busy)
            metrics["t/spread_limit"][seed] = 0.25
        out[(point,)] = metrics
    return out


POINTS = {("a",): {"p": "a"}, ("b",): {"p": "b"}}


def test_an_uncontended_clear_difference_decides_the_check():
    [result] = decide([evaluate(CHECK, samples(), POINTS, 0)])
    assert result.outcome == "supported"


def test_a_contended_timing_never_decides_a_check():
    [result] = decide([evaluate(CHECK, samples(contended_seed=2), POINTS, 0)])
    assert result.outcome == "inconclusive" and result.p_support is None
    assert "timing contended (spread 90% > 25%" in result.detail
    # the same for a check that would be contradicted: a busy machine says nothing either way
    reverse = {**CHECK, "points": [{"p": "b"}, {"p": "a"}]}
    [result] = decide([evaluate(reverse, samples(contended_seed=0), POINTS, 0)])
    assert result.outcome == "inconclusive" and "timing contended" in result.detail


def arm_sweep(tmp_path, contended: bool):
    """A sweep like window_cost leaves it: one job per seed, each holding both arms timed interleaved."""
    lab = {"name": "timed", "title": "timed", "claim": "a is faster", "table": ["t"], "plots": [], "checks": [CHECK]}
    for seed in range(5):
        folder = tmp_path / str(seed)
        folder.mkdir(parents=True)
        (folder / "config_resolved.yaml").write_text(json.dumps({"lab": lab}))
        arms = []
        for point, values in (("a", FAST), ("b", SLOW)):
            busy = contended and point == "a" and seed == 3
            t = {"t": values[seed], "t/spread": 0.6 if busy else 0.02, "t/contended": float(busy)}
            arms.append({"params": {"p": point}, "metrics": {**t, "t/spread_limit": 0.25}})
        record = {"metric": "lab/load_avg", "value": 1.0 + seed, "overrides": [f"seed={seed}"], "arms": arms}
        record["metrics"] = {"lab/load_avg": 1.0 + seed, "lab/cores": 2.0}
        (folder / "result.json").write_text(json.dumps(record))
    return tmp_path


def test_the_report_reads_arms_as_points_and_shows_spread_and_flag(tmp_path):
    path, outcome, _ = write_report(arm_sweep(tmp_path / "quiet", contended=False))
    assert outcome == "supported"
    text = path.read_text()
    assert "4 jobs" not in text and "| a | 5 |" in text and "| b | 5 |" in text  # 5 jobs, 2 points of 5 seeds
    assert "- p=a, " in text and "10 ± 2% (seed 0)" in text
    assert "Load average (1 min) at the end of the jobs: 1 to 5 on 2 cores." in text  # shown, never deciding
    path, outcome, _ = write_report(arm_sweep(tmp_path / "busy", contended=True))
    text = path.read_text()
    assert outcome == "inconclusive" and "29.8 ± 2% (seed 2)" in text
    assert "10.1 ± 60% **contended** (seed 3)" in text and "timing contended (spread 60% > 25%" in text


# ---- a real question: window_cost times its arms in one job ------------------------------------------------------


@pytest.mark.slow
@pytest.mark.lab
def test_window_cost_times_its_arms_interleaved_in_one_job(tmp_path):
    # one real job (tests/lab_sweeps.py): both arms at a tiny length, timed in it
    record = quick_job("window_cost", tmp_path / "job", **{"measure.batch_size": "1"})
    assert len(record["arms"]) == 2 and {arm["params"]["variant"] for arm in record["arms"]} == {"full", "window128"}
    # five seeds of it, as `run window_cost --quick seed=1,2,3,4,5` leaves them: the memory check decides, the timing
    # checks (at n = 4096) are not in this run
    sweep = sweep_of_copies(tmp_path / "job", tmp_path / "window_cost", "seed=1,2,3,4,5", "measure.batch_size=1")
    write_report(sweep)
    assert_lab_report(sweep, min_arms=10)  # window_cost's job in the suite (see QUICK in tests/test_lab.py)
    records = [json.loads(p.read_text()) for p in sorted(sweep.glob("*/result.json"))]
    assert len(records) == 5 and all(len(r["arms"]) == 2 for r in records)  # one job per seed, both arms in it
    for record in records:
        for arm in record["arms"]:
            m = arm["metrics"]
            assert m["lab/step_ms"] > 0 and m["lab/step_ms/spread"] >= 0 and m["lab/step_ms/spread_limit"] == 0.25
            assert m["lab/step_ms/contended"] == float(m["lab/step_ms/spread"] > 0.25)
    report = (sweep / "report.md").read_text()
    assert "Timings: the median ± spread (interquartile range / median)" in report
    assert "- at n = 1024 the window needs less memory than full attention written out**: supported" in (
        report.replace("- **", "- ")
    )
    # a timing check on these arms, with one seed's timing marked contended: inconclusive, whatever the numbers
    from zoo.lab.decide.sweep import load_sweep

    loaded = load_sweep(sweep)
    job = next(j for j in loaded.jobs if j.params["variant"] == "full")
    job.metrics.update({"lab/step_ms/contended": 1.0, "lab/step_ms/spread": 0.8})
    check = {**CHECK, "metric": "lab/step_ms", "points": [{"variant": "window128"}, {"variant": "full"}]}
    values = loaded.samples(["lab/step_ms", *timing.companions(["lab/step_ms"])])
    [result] = decide([evaluate(check, values, loaded.points, 0)])
    assert result.outcome == "inconclusive" and "timing contended (spread 80% > 25%" in result.detail


def test_the_probes_of_trained_arms_record_their_spread_too():
    """CostProbe (dot_vs_additive) and the fold timing (bn_vit) carry the same companions: a job that shared the
    machine flags its own timing, even where the arms are trained in separate jobs."""
    from zoo.lab.measure.cost import CostProbe

    probe = CostProbe()
    probe.times = [0.010, 0.011, 0.010, 0.030, 0.031, 0.029, 0.010, 0.030]
    metrics = probe.result_record()["metrics"]
    assert metrics["probe/cost/step_ms"] == pytest.approx(20.0) and metrics["probe/cost/step_ms/contended"] == 1.0
    probe.times = [0.010, 0.0101, 0.0099, 0.010]
    assert probe.result_record()["metrics"]["probe/cost/step_ms/contended"] == 0.0


def test_a_ratio_of_two_timings_is_contended_when_either_is():
    quiet, busy = timing.Timing((10.0, 10.1, 9.9, 10.0)), timing.Timing((10.0, 20.0, 10.0, 20.0))
    both = timing.ratio("r", busy, quiet)
    assert both["r"] == pytest.approx(15.0 / 10.0) and both["r/contended"] == 1.0
    assert both["r/spread"] == busy.spread and timing.ratio("r", quiet, quiet)["r/contended"] == 0.0
    growth = timing.derived("g", 1.7, busy)  # any number read off a contended timing is contended too
    assert growth == {"g": 1.7, "g/spread": busy.spread, "g/contended": 1.0, "g/spread_limit": busy.limit}


def test_bn_vit_times_the_folded_model_and_its_layernorm_twin_in_one_process():
    pytest.importorskip("zoo.core.bn_fold", reason="the BatchNorm fold (zoo/core/bn_fold.py) is not there yet")
    import torch

    from zoo.lab.measure.folding import fold_timing
    from zoo.models import ViT

    torch.manual_seed(0)
    net = ViT.from_preset(
        "vit-nano/4", image_size=28, in_channels=1, num_classes=10, norm="batchnorm", ff_inner_norm="batchnorm"
    )
    twin = {"norm": "layernorm", "ff_inner_norm": None}
    values = fold_timing(net.eval(), torch.randn(8, 1, 28, 28), repeats=3, warmup=1, compare_with=twin)
    assert values["lab/infer_ms_compared"] > 0 and values["lab/fold_max_diff"] <= 1e-5
    ratio = values["lab/infer_ms_compared"] / values["lab/infer_ms_folded"]
    assert values["lab/compared_over_folded"] == pytest.approx(ratio)
    flags = [values[f"lab/{m}/contended"] for m in ("infer_ms_compared", "infer_ms_folded")]
    assert values["lab/compared_over_folded/contended"] == float(any(flags))
    assert net.config.norm == "batchnorm"  # the twin is a new model; the probed one is unchanged


def test_cost_probe_times_an_additive_twin_in_the_same_rounds():
    """dot_vs_additive: after training, the model's step and its additive twin's, interleaved in one process."""
    from types import SimpleNamespace

    import torch

    from zoo.lab.measure.cost import CostProbe
    from zoo.models import GPT

    torch.manual_seed(0)
    net = GPT.from_preset("gpt-nano", vocab_size=32, n_head=1)
    probe = CostProbe(compare_with={"attn_score": "additive", "attn_scale": "none"}, rounds=2)
    probe._batch = (torch.randint(0, 32, (2, 16)), torch.randint(0, 32, (2, 16)))
    metrics = probe._time_twin(SimpleNamespace(net=net, device=torch.device("cpu")))
    assert metrics["probe/cost/compared_step_ms"] > 0 and metrics["probe/cost/compared_over_step/spread_limit"] == 0.25
    assert net.config.attn_score == "dot" and net.training  # the probed model is unchanged
