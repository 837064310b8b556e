"""The lab's statistics on cases whose answer is known (issue 25, item 6): the
paired and Welch intervals against scipy's tests, Holm's correction on a worked list, simulated experiments whose
true effect is known (the rate of supported outcomes is the test's power; two draws of one distribution are not
contradicted), TOST on noisy and tight arms, and the seed minimum. No training: the checks run on numbers."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats as scipy_stats

from zoo.lab.decide import stats
from zoo.lab.decide.claims import decide, evaluate, smallest_effect, verdict

POINTS = {("a",): {"p": "a"}, ("b",): {"p": "b"}}


def outcome_of(a: list[float], b: list[float], expect: str = "less", seeds_b: list[str] | None = None, **extra):
    """The outcome of one claim check on arms a and b (metric m, no default smallest effect)."""
    samples = {
        ("a",): {"m": {str(i + 1): v for i, v in enumerate(a)}},
        ("b",): {"m": dict(zip(seeds_b or [str(i + 1) for i in range(len(b))], b))},
    }
    check = {"name": "c", "metric": "m", "expect": expect, "points": [{"p": "a"}, {"p": "b"}], **extra}
    (result,) = decide([evaluate(check, samples, POINTS, 0)])
    return result


# ---- distributions and intervals ---------------------------------------------------------------------------------


def test_paired_and_welch_agree_with_scipy():
    a, b = [1.0, 2.0, 3.0, 4.0, 5.0], [1.5, 2.9, 3.2, 4.8, 5.9]
    effect = stats.paired(a, b)
    reference = scipy_stats.ttest_rel(b, a, alternative="greater")
    assert effect.p_above(0.0) == pytest.approx(reference.pvalue) and effect.df == 4
    low, high = effect.interval()
    ci = scipy_stats.ttest_rel(b, a).confidence_interval(0.95)
    assert (low, high) == pytest.approx((ci.low, ci.high))

    a, b = [1.0, 2.0, 3.0, 4.0, 5.0], [2.0, 4.0, 6.0, 8.0, 10.0, 12.0]
    effect = stats.welch(a, b)
    reference = scipy_stats.ttest_ind(b, a, equal_var=False, alternative="greater")
    assert effect.p_above(0.0) == pytest.approx(reference.pvalue)
    assert effect.df == pytest.approx(6.972, abs=1e-3)  # Welch-Satterthwaite, worked by hand
    assert effect.estimate == pytest.approx(4.0) and effect.method == "Welch t"


def test_arms_that_ran_the_same_seeds_are_paired_and_others_are_not():
    assert stats.compare({"1": 1.0, "2": 2.0}, {"2": 2.5, "1": 1.4}).method == "paired t"
    paired = stats.compare({"1": 1.0, "2": 2.0}, {"2": 2.5, "1": 1.4})
    assert paired.estimate == pytest.approx(0.45)  # pairs by seed name, not by position
    assert stats.compare({"1": 1.0, "2": 2.0}, {"3": 2.5, "4": 1.4}).method == "Welch t"


def test_zero_spread_is_an_exact_difference():
    effect = stats.paired([1.0, 1.0, 1.0], [2.0, 2.0, 2.0])
    assert effect.interval() == (1.0, 1.0) and effect.p_above(0.5) == 0.0 and effect.p_below(0.5) == 1.0


def test_holm_on_a_worked_list():
    # sorted: 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> kept at 0.06 (monotone)
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert stats.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1, then monotone and stats.holm([]) == []


# ---- simulated experiments ----------------------------------------------------------------------------------------


def simulate(effect_sd: float, runs: int, paired: bool, rng: np.random.Generator) -> dict[str, float]:
    """The share of each outcome of `a < b` when b's true mean exceeds a's by `effect_sd` standard deviations of
    the quantity the test uses (the per-seed difference when paired, one arm's spread when not), 5 seeds each."""
    seeds = 5
    counts = dict.fromkeys(("supported", "contradicted", "inconclusive"), 0)
    for _ in range(runs):
        if paired:  # a shared per-seed component (the data order) cancels in the difference
            shared = rng.normal(0, 3.0, seeds)
            a = shared + rng.normal(0, 1 / math.sqrt(2), seeds)
            b = shared + rng.normal(0, 1 / math.sqrt(2), seeds) + effect_sd
            counts[outcome_of(list(a), list(b)).outcome] += 1
        else:
            a, b = rng.normal(0, 1, seeds), rng.normal(effect_sd, 1, seeds)
            other_seeds = [str(s) for s in range(6, 11)]
            counts[outcome_of(list(a), list(b), seeds_b=other_seeds).outcome] += 1
    return {k: v / runs for k, v in counts.items()}


def expected_power(effect_sd: float, df: float, ncp_scale: float) -> float:
    """Power of the one-sided t test at alpha 0.025: the noncentral t beyond the critical value."""
    critical = scipy_stats.t.ppf(1 - stats.ALPHA, df)
    return float(scipy_stats.nct.sf(critical, df, effect_sd * ncp_scale))


def test_a_known_paired_effect_is_supported_at_the_expected_power():
    rng = np.random.default_rng(25)
    power = expected_power(2.0, 4, math.sqrt(5))  # 0.909: d = 2 on the paired differences, 5 seeds
    assert power == pytest.approx(0.909, abs=1e-3)
    rates = simulate(2.0, 1500, paired=True, rng=rng)
    assert abs(rates["supported"] - power) < 0.03, rates
    assert rates["contradicted"] < 0.005
    power = expected_power(1.0, 4, math.sqrt(5))  # 0.40 for half the effect
    rates = simulate(1.0, 1500, paired=True, rng=rng)
    assert abs(rates["supported"] - power) < 0.04, rates


def test_a_known_unpaired_effect_is_supported_about_as_often_as_welch_predicts():
    rng = np.random.default_rng(26)
    # Welch's df is random; at equal n and variances it sits near 8, and the ncp is d * sqrt(n / 2)
    power = expected_power(2.0, 8, math.sqrt(5 / 2))
    rates = simulate(2.0, 1500, paired=False, rng=rng)
    assert abs(rates["supported"] - power) < 0.06, (rates, power)


def test_two_draws_of_one_distribution_are_inconclusive_not_contradicted():
    rng = np.random.default_rng(27)
    for paired in (True, False):
        rates = simulate(0.0, 2000, paired=paired, rng=rng)
        # each one-sided test has size 0.025: the claim is "supported" or "contradicted" by chance that often
        assert rates["contradicted"] <= 0.05 and rates["supported"] <= 0.05, rates
        assert rates["inconclusive"] >= 0.9, rates


# ---- outcomes of single checks ------------------------------------------------------------------------------------


def test_tost_refuses_equivalence_for_noisy_arms_and_accepts_tight_ones():
    rng = np.random.default_rng(3)
    noisy_a, noisy_b = list(2.0 + rng.normal(0, 0.2, 5)), list(2.0 + rng.normal(0, 0.2, 5))
    result = outcome_of(noisy_a, noisy_b, "similar", smallest_effect=0.04)  # bound 0.04 against a spread of 0.2
    assert result.outcome == "inconclusive", result.detail
    tight_a, tight_b = list(2.0 + rng.normal(0, 0.002, 5)), list(2.0 + rng.normal(0, 0.002, 5))
    assert outcome_of(tight_a, tight_b, "similar", smallest_effect=0.04).outcome == "supported"
    far_b = [v + 0.5 for v in tight_b]
    assert outcome_of(tight_a, far_b, "similar", smallest_effect=0.04).outcome == "contradicted"
    assert outcome_of(tight_a, tight_b, "similar", smallest_effect=0.001).outcome == "inconclusive"
    assert outcome_of(tight_a, tight_b, "similar", smallest_effect=0.05).outcome == "supported"


def test_a_diverged_arm_is_never_similar_and_counts_as_worst():
    finite = [2.0, 2.01, 2.02, 1.99, 2.0]
    diverged = [2.0, float("nan"), 2.02, 1.99, 2.0]
    result = outcome_of(finite, diverged, "similar", diverged="worst")
    assert result.outcome == "contradicted" and "not similar" in result.detail
    assert outcome_of(finite, diverged, "less", diverged="worst").outcome == "supported"
    assert outcome_of(diverged, finite, "less", diverged="worst").outcome == "contradicted"
    assert outcome_of(finite, diverged, "less").outcome == "inconclusive"  # without diverged: worst, undecided


def test_fewer_than_five_seeds_decide_nothing_however_large_the_effect():
    result = outcome_of([1.0, 1.1, 1.0, 1.1], [9.0, 9.1, 9.0, 9.1])
    assert result.outcome == "inconclusive" and "4 seeds per point" in result.detail and "at least 5" in result.detail
    assert "95% CI" in result.detail  # the interval is still shown
    assert outcome_of([1.0, 1.1, 1.0, 1.1, 1.05], [9.0, 9.1, 9.0, 9.1, 9.05]).outcome == "supported"


def test_the_smallest_effect_of_interest_is_the_boundary_of_a_directional_claim():
    a = [2.000, 2.010, 2.020, 1.990, 2.005]
    b = [v + 0.004 + 0.0001 * i for i, v in enumerate(a)]  # b is reliably worse, but by 0.004 nats only
    samples = {("a",): {"val/loss": dict(zip("12345", a))}, ("b",): {"val/loss": dict(zip("12345", b))}}
    check = {"name": "c", "metric": "val/loss", "expect": "less", "points": [{"p": "a"}, {"p": "b"}]}
    assert smallest_effect(check) == 0.01  # the default for a loss, in nats
    (result,) = decide([evaluate(check, samples, POINTS, 0)])
    assert result.outcome == "contradicted"  # smaller than worth reporting
    (result,) = decide([evaluate({**check, "smallest_effect": 0}, samples, POINTS, 0)])
    assert result.outcome == "supported"
    assert smallest_effect(check, {"smallest_effect": {"val/loss": 0.05}}) == 0.05
    assert smallest_effect({**check, "metric": "val/bleu"}) == 0.5
    assert smallest_effect({**check, "metric": "val/acc"}) == 0.005


def test_a_factor_is_tested_on_the_log_ratio():
    fast = [10.0, 10.2, 9.9, 10.1, 10.0]
    assert outcome_of(fast, [v * 3 for v in fast], factor=2).outcome == "supported"
    assert outcome_of(fast, [v * 1.5 for v in fast], factor=2).outcome == "contradicted"


def test_holm_runs_over_the_claim_checks_and_sanity_checks_stay_apart():
    # Five checks each with a one-sided p near 0.02: alone each is supported, corrected together none is.
    rng = np.random.default_rng(5)
    results = []
    while len(results) < 5:
        a = list(rng.normal(0, 1, 5))
        b = [v + 1.2 + rng.normal(0, 0.6) for v in a]
        samples = {("a",): {"m": dict(zip("12345", a))}, ("b",): {"m": dict(zip("12345", b))}}
        check = {"name": f"c{len(results)}", "metric": "m", "expect": "less", "points": [{"p": "a"}, {"p": "b"}]}
        result = evaluate(check, samples, POINTS, 0)
        if 0.01 < result.p_support < 0.025:
            results.append(result)
    assert all(decide([r])[0].outcome == "supported" for r in results)
    corrected = decide(results)
    assert all(r.outcome == "inconclusive" for r in corrected) and verdict(corrected) == "inconclusive"
    # a check no test could decide (a point that did not learn) still counts in the family, with p = 1
    gated = replace(results[1], p_support=None, p_contradict=None)
    alone = decide([results[0]])[0].detail.split("Holm ")[1].split(";")[0]
    counted = decide([results[0], gated])[0].detail.split("Holm ")[1].split(";")[0]
    assert float(counted) == pytest.approx(2 * float(alone), rel=0.05) and decide([results[0], gated])[1] == gated

    sanity = {"name": "exact", "metric": "m", "expect": "below", "threshold": 1.0, "kind": "sanity"}
    samples = {("a",): {"m": {"1": 0.1, "2": 0.2}}}
    fine = evaluate({**sanity, "points": [{"p": "a"}]}, samples, POINTS, 0)
    assert fine.outcome == "supported" and "every seed" in fine.detail  # two seeds suffice: it holds on each run
    broken = evaluate({**sanity, "threshold": 0.15, "points": [{"p": "a"}]}, samples, POINTS, 0)
    assert broken.outcome == "contradicted"
    # the verdict is the claim checks' only: a contradicted sanity check does not make a claim contradicted
    supported = decide([results[0]])
    assert verdict(decide([results[0], broken])) == verdict(supported) == "supported"


# ---- a difference in differences ----------------------------------------------------------------------------------

GRID = {(m, n): {"model": m, "n": n} for m in ("cnn", "vit") for n in ("500", "8000")}
GAP_CHECK = {
    "name": "gap",
    "metric": "val/acc",
    "expect": "diff_in_diff",
    "points": [{"model": m, "n": n} for n in ("500", "8000") for m in ("cnn", "vit")],
}


def gap_outcome(cnn_small, vit_small, cnn_large, vit_large):
    """The outcome of 'cnn - vit at 500 is wider than cnn - vit at 8000' on five seeds per point."""
    values = {
        ("cnn", "500"): cnn_small,
        ("vit", "500"): vit_small,
        ("cnn", "8000"): cnn_large,
        ("vit", "8000"): vit_large,
    }
    samples = {key: {"val/acc": {str(s + 1): v for s, v in enumerate(vs)}} for key, vs in values.items()}
    (result,) = decide([evaluate(GAP_CHECK, samples, GRID, 0)])
    return result


def test_a_gap_that_shrinks_is_supported_and_one_that_stays_is_not():
    cnn = [0.95, 0.96, 0.955, 0.952, 0.958]
    # The ViT's seeds vary far more than the gap change between seeds does: only the pairing by seed makes it clear.
    vit_small = [0.80, 0.90, 0.85, 0.82, 0.88]
    shrinking = gap_outcome(cnn, vit_small, cnn, [v + 0.08 + 0.002 * i for i, v in enumerate(vit_small)])
    assert shrinking.outcome == "supported", shrinking.detail
    assert shrinking.effects[0][0] == pytest.approx(0.084)  # the gap narrowed by 0.08 + the 0.004 mean of the trend
    assert "difference in differences" in shrinking.detail
    same = gap_outcome(cnn, vit_small, cnn, vit_small)  # the same gap at both sizes: no narrowing at all
    assert same.outcome == "contradicted", same.detail
    widening = gap_outcome(cnn, vit_small, cnn, [v - 0.05 for v in vit_small])
    assert widening.outcome == "contradicted"


def test_a_gap_check_needs_four_points_on_one_metric():
    with pytest.raises(ValueError, match="diff_in_diff' needs exactly 4 points"):
        evaluate({**GAP_CHECK, "points": GAP_CHECK["points"][:3]}, {}, GRID, 0)
    with pytest.raises(ValueError, match="neither diverged, factor nor metric_b"):
        evaluate({**GAP_CHECK, "metric_b": "val/loss"}, {}, GRID, 0)
