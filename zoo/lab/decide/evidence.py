"""The numbers the lab's plots draw, apart from the drawing (zoo/lab/report/plots.py) so that tests can check them: each
arm's seeds with their mean and its 95% t-interval; and for each claim check that compares two arms on the same
seeds, the per-seed differences a - b with their mean, the 95% paired interval and the band the check tests; for a
difference-in-differences check (`expect: diff_in_diff`, four points) the per-seed (a - b) - (c - d) over the seeds
all four points ran, with the interval the check was decided on and its smallest effect.

Intervals come from zoo/lab/decide/stats.py and the check's boundaries from zoo/lab/decide/claims.py, so a plot shows
what the verdict was decided on. A check whose two arms ran different seeds is compared by a Welch interval, and has no
per-seed differences to draw: it gets no panel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import stats
from .claims import DIFF_IN_DIFF, Stat, equivalence_bound, rule_of, select
from .metric_names import describe
from .sweep import Sweep

TWO_ARMS = ("less", "greater", "similar")  # the expectations that compare exactly two points
# Where the claim puts a - b relative to the shaded band (±band around zero).
CLAIMED = {
    "less": "claim: a - b below the band",
    "greater": "claim: a - b above the band",
    "similar": "claim: a - b inside the band",
    "diff_in_diff": "claim: (a - b) - (c - d) above the smallest effect",
}


@dataclass(frozen=True)
class ArmSummary:
    """One arm (point) on one metric: its per-seed values, their mean and the mean's 95% t-interval (None with one
    seed, or when a seed is not finite: no spread to speak of)."""

    values: list[float]
    mean: float
    interval: tuple[float, float] | None


def arm_summary(values) -> ArmSummary:
    values = [float(v) for v in values]
    if len(values) < 2 or not all(math.isfinite(v) for v in values):
        return ArmSummary(values, Stat.of(values).mean, None)
    effect = stats.one_sample(values, 0.0)  # mean - 0: the mean itself, with its t-interval
    return ArmSummary(values, effect.estimate, effect.interval())


@dataclass(frozen=True)
class PairedDifference:
    """A two-arm claim check, seed by seed: `differences[i]` is a - b on `seeds[i]` (of log a - log b for a check
    with a `factor`); `interval` is the 95% paired t-interval of their mean (None, with `note`, when there is none);
    `band` the half-width of the band the check tests against (its smallest effect, log factor or equivalence bound;
    None when it has none)."""

    check: str
    a: str
    b: str
    unit: str
    seeds: list[str]
    differences: list[float]
    mean: float | None
    interval: tuple[float, float] | None
    band: float | None
    band_label: str
    claimed: str
    note: str = ""
    # a difference in differences: its other two points (the differences are then (a - b) - (c - d), and `band` is
    # the one-sided line the effect must clear, not a band around zero)
    c: str = ""
    d: str = ""


def _point_label(sweep: Sweep, key: tuple, metric: str, other_metric: str) -> str:
    return sweep.label(key) + (f" [{metric}]" if metric != other_metric else "")


def _band(check: dict, lab: dict, a: dict[str, float]) -> tuple[float | None, str]:
    """The band the check's effect must clear (or, for `similar`, stay inside), as claims.py computes it."""
    rule = rule_of(check, lab)
    if check["expect"] == "similar":
        bound = equivalence_bound(rule, a)
        return (bound, f"equivalence bound ±{bound:.3g}") if bound else (None, "")
    if not rule.boundary:
        return None, ""
    if rule.factor is not None:
        return rule.boundary, f"ratio {rule.factor:g} (log ±{rule.boundary:.3g})"
    return rule.boundary, f"smallest effect ±{rule.boundary:g}"


def paired_difference(sweep: Sweep, check: dict, index: int) -> PairedDifference | None:
    """The check's per-seed differences; None when it is not a two-arm claim check, a point is not in the run, or
    the two arms do not share their seeds (then they are not paired)."""
    if check.get("kind", "claim") == "claim" and check.get("expect") == "diff_in_diff":
        return diff_in_diff(sweep, check, index)
    if check.get("kind", "claim") != "claim" or check.get("expect") not in TWO_ARMS:
        return None
    name = check.get("name", f"check {index}")
    keys = [select(sweep.points, s, f"lab.checks[{index}] ('{name}')") for s in check["points"]]
    metrics = [check["metric"], check.get("metric_b") or check["metric"]]
    if None in keys:
        return None
    samples = sweep.samples(metrics)
    a, b = (samples.get(k, {}).get(m) for k, m in zip(keys, metrics))
    if not a or not b or set(a) != set(b):
        return None
    seeds = sorted(a)  # the order stats.compare pairs them in
    labels = _point_label(sweep, keys[0], metrics[0], metrics[1]), _point_label(sweep, keys[1], metrics[1], metrics[0])
    unit = f"a - b, {describe(metrics[0], sweep.lab)}"
    note = ""
    if check.get("factor") is not None:  # the check tests the log ratio: show the same scale
        if min([*a.values(), *b.values()]) <= 0:
            note = "a ratio needs positive values"
        else:
            a, b = {s: math.log(v) for s, v in a.items()}, {s: math.log(v) for s, v in b.items()}
            unit = f"log(a / b), {describe(metrics[0], sweep.lab)}"
    differences = [a[s] - b[s] for s in seeds]
    band, band_label = _band(check, sweep.lab, a)
    mean, interval = None, None
    if not note and not all(math.isfinite(d) for d in differences):
        note = "a run diverged: no interval"
    elif not note and len(seeds) < 2:
        note = "one seed: no interval"
    elif not note:
        effect = stats.paired([b[s] for s in seeds], [a[s] for s in seeds])  # paired(x, y) is y - x: here a - b
        mean, interval = effect.estimate, effect.interval()
    return PairedDifference(
        name, *labels, unit, seeds, differences, mean, interval, band, band_label, CLAIMED[check["expect"]], note
    )


def diff_in_diff(sweep: Sweep, check: dict, index: int) -> PairedDifference | None:
    """A `diff_in_diff` check seed by seed: (a - b) - (c - d) on each seed all four points ran, their mean and the
    one-sample t-interval the check is decided on (stats.paired_contrast); None when a point is not in the run or
    fewer than two seeds ran all four."""
    name = check.get("name", f"check {index}")
    keys = [select(sweep.points, s, f"lab.checks[{index}] ('{name}')") for s in check["points"]]
    if None in keys:
        return None
    samples = sweep.samples([check["metric"]])
    values = [samples.get(k, {}).get(check["metric"]) for k in keys]
    if not all(values):
        return None
    seeds = sorted(set.intersection(*(set(v) for v in values)))
    if len(seeds) < 2:
        return None
    differences = [sum(w * v[s] for w, v in zip(DIFF_IN_DIFF, values)) for s in seeds]
    rule = rule_of(check, sweep.lab)
    labels = [sweep.label(k) for k in keys]
    unit = f"(a - b) - (c - d), {describe(check['metric'], sweep.lab)}"
    band = rule.boundary or None
    band_label = f"smallest effect {rule.boundary:g}" if band else ""
    mean, interval, note = None, None, ""
    if not all(math.isfinite(d) for d in differences):
        note = "a run diverged: no interval"
    else:
        effect = stats.paired_contrast(values, list(DIFF_IN_DIFF))
        mean, interval = effect.estimate, effect.interval()
    return PairedDifference(
        name,
        labels[0],
        labels[1],
        unit,
        seeds,
        differences,
        mean,
        interval,
        band,
        band_label,
        CLAIMED["diff_in_diff"],
        note,
        labels[2],
        labels[3],
    )


def paired_differences(sweep: Sweep, grid: Sweep | None = None) -> list[PairedDifference]:
    """Every two-arm (or difference-in-differences) claim check of the question with paired seeds, in the order of
    the checks. For a question that tunes a parameter per arm (zoo/lab/decide/tuning.py) `sweep` holds each arm's chosen
    point and `grid` every point: a check read on the whole grid (`grid: true`) is drawn from it."""
    checks = sweep.lab.get("checks", [])
    found = (paired_difference(grid if grid and c.get("grid") is True else sweep, c, i) for i, c in enumerate(checks))
    return [d for d in found if d is not None]
