"""The `diff_in_diff` check (zoo/lab/decide/claims.py) on simulated experiments whose interaction is known: found when
present, not supported when absent, contradicted when reversed; each seed's four runs are paired (a noise shared
by a seed's runs cancels); its interval is the one-sample t interval of the per-seed contrasts; and
ln_placement's checks use it at each learning rate on the published numbers. No training: checks run on numbers."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats as scipy_stats

from zoo.lab.decide import stats
from zoo.lab.decide.claims import check_config, decide, evaluate
from zoo.lab.questions.configs import question

POINTS = {(name,): {"p": name} for name in "abcd"}
CHECK = {"name": "did", "metric": "m", "expect": "diff_in_diff", "points": [{"p": n} for n in "abcd"]}


def simulate(gain_first: float, gain_second: float, seeds: int = 8, shared: float = 0.2, own: float = 0.01, rng=0):
    """Four points' {seed: value}: a - b = gain_first, c - d = gain_second on average; each seed adds `shared` noise
    to all four of its runs (its data order) and `own` noise to each run."""
    rng = np.random.default_rng(rng)
    base = {"a": 4.0 + gain_first, "b": 4.0, "c": 3.9 + gain_second, "d": 3.9}
    seed_noise = rng.normal(0, shared, seeds)
    return {
        (name,): {"m": {str(s + 1): base[name] + seed_noise[s] + rng.normal(0, own) for s in range(seeds)}}
        for name in "abcd"
    }


def decided(samples: dict, **extra):
    (result,) = decide([evaluate({**CHECK, **extra}, samples, POINTS, 0)])
    return result


def test_an_interaction_of_known_size_is_found_and_its_interval_covers_it():
    result = decided(simulate(0.5, 0.1))
    assert result.outcome == "supported", result.detail
    ((estimate, low, high),) = result.effects
    assert low < 0.4 < high and high - low < 0.05
    assert estimate == pytest.approx(0.4, abs=0.02)


def test_no_interaction_is_not_supported_and_equal_gains_read_as_too_small_to_matter():
    # both arms gain 0.3 from the treatment: a real main effect, no interaction
    result = decided(simulate(0.3, 0.3), smallest_effect=0.01)
    assert result.outcome == "contradicted", result.detail  # an effect under the smallest one worth reporting
    ((_, low, high),) = result.effects
    assert low < 0 < high


def test_a_reversed_interaction_is_contradicted():
    result = decided(simulate(0.1, 0.5))
    assert result.outcome == "contradicted", result.detail
    assert result.effects[0][0] == pytest.approx(-0.4, abs=0.02)


def test_the_seeds_are_paired_so_a_noise_shared_by_a_seed_cancels():
    # a seed-shared noise of 0.5 nats swamps an interaction of 0.05 for unpaired arms; paired, it cancels
    samples = simulate(0.15, 0.1, shared=0.5, own=0.005)
    assert decided(samples, smallest_effect=0.0).outcome == "supported"
    unpaired = stats.welch(list(samples[("a",)]["m"].values()), list(samples[("b",)]["m"].values()))
    assert unpaired.interval()[0] < 0  # the same data read arm against arm: the noise hides even a - b


def test_the_interval_is_the_one_sample_t_interval_of_the_per_seed_contrasts():
    samples = simulate(0.2, 0.1, seeds=6, own=0.05, rng=3)
    a, b, c, d = (samples[(n,)]["m"] for n in "abcd")
    per_seed = [(a[s] - b[s]) - (c[s] - d[s]) for s in a]
    effect = stats.paired_contrast([a, b, c, d], [1, -1, -1, 1])
    low, high = scipy_stats.ttest_1samp(per_seed, 0.0).confidence_interval(0.95)
    assert effect.estimate == pytest.approx(np.mean(per_seed))
    assert effect.interval() == pytest.approx((low, high))
    assert effect.n == 6 and effect.df == 5


def test_only_the_seeds_all_four_points_ran_are_paired():
    samples = simulate(0.5, 0.1, seeds=7)
    del samples[("c",)]["m"]["7"]  # seed 7 lacks one run: its contrast cannot be formed
    result = decided(samples)
    assert "over 6 seeds all four points ran" in result.detail
    for seeds in (1, 4):  # too few common seeds: no outcome, and the text says why
        few = {k: {"m": {s: v for s, v in p["m"].items() if int(s) <= seeds}} for k, p in simulate(0.5, 0.1).items()}
        result = decided(few)
        assert result.outcome == "inconclusive" and "needs at least 5" in result.detail


def test_at_the_boundary_the_check_is_supported_about_as_often_as_its_alpha():
    # the true interaction equals the smallest effect: a calibrated one-sided test says "supported" ~2.5% of the time
    wins = sum(
        decided(simulate(0.11, 0.1, seeds=5, own=0.02, rng=r), smallest_effect=0.01).outcome == "supported"
        for r in range(300)
    )
    assert wins / 300 < 0.06


def test_a_diverged_run_leaves_it_inconclusive():
    samples = simulate(0.5, 0.1)
    samples[("a",)]["m"]["3"] = float("nan")
    result = decided(samples)
    assert result.outcome == "inconclusive" and "diverged" in result.detail


def test_every_seed_decides_a_sanity_difference_in_differences():
    assert decided(simulate(0.5, 0.1), kind="sanity").outcome == "supported"
    assert decided(simulate(0.1, 0.5), kind="sanity").outcome == "contradicted"


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"points": [{"p": n} for n in "abc"]}, "needs exactly 4 points"),
        ({"diverged": "worst"}, "neither diverged, factor nor metric_b"),
        ({"factor": 2}, "neither diverged, factor nor metric_b"),
        ({"metric_b": "val/acc"}, "neither diverged, factor nor metric_b"),
    ],
)
def test_a_malformed_difference_in_differences_is_a_one_line_error(bad, message):
    with pytest.raises(ValueError, match=message):
        check_config({**CHECK, **bad}, 0)


# ---- ln_placement ------------------------------------------------------------------------------------------------

# The published ln_placement means (docs/lab.md, 2 seeds, 280 steps): {(norm_first, lr, warm-up): val loss}
PUBLISHED = {
    ("false", "0.001", "0"): 3.966,
    ("false", "0.001", "100"): 3.945,
    ("true", "0.001", "0"): 4.028,
    ("true", "0.001", "100"): 4.013,
    ("false", "0.003", "0"): 3.886,
    ("false", "0.003", "100"): 3.291,
    ("true", "0.003", "0"): 3.524,
    ("true", "0.003", "100"): 3.285,
}


def test_ln_placement_tests_the_interaction_at_each_learning_rate_on_its_published_numbers():
    lab = question("ln_placement")
    checks = [c for c in lab["checks"] if c["expect"] == "diff_in_diff"]
    assert sorted({p["model.optimizer.lr"] for c in checks for p in c["points"]}) == [0.001, 0.003]
    points = {
        key: {"model.net.norm_first": key[0], "model.optimizer.lr": key[1], "model.scheduler.warmup_steps": key[2]}
        for key in itertools.product(("false", "true"), ("0.001", "0.003"), ("0", "100"))
    }
    # five seeds around the published means, each seed's four runs sharing a data-order noise
    rng = np.random.default_rng(0)
    shared = rng.normal(0, 0.03, 5)
    samples = {
        k: {"val/loss": {str(s + 1): PUBLISHED[k] + shared[s] + rng.normal(0, 0.01) for s in range(5)}} for k in points
    }
    results = decide([evaluate(c, samples, points, i, lab) for i, c in enumerate(checks)])
    by_lr = {c["points"][0]["model.optimizer.lr"]: r for c, r in zip(checks, results)}
    # at 3e-3: post-LN gains 0.595 from the warm-up, pre-LN 0.239: the interaction (0.356) is found
    assert by_lr[0.003].outcome == "supported", by_lr[0.003].detail
    assert by_lr[0.003].effects[0][1] < 0.356 < by_lr[0.003].effects[0][2]
    # at 1e-3 both gain about 0.02 (nothing learned much): an interaction of 0.006 is under the 0.01 nats of interest
    assert by_lr[0.001].outcome != "supported"
