"""The numbers the lab's plots draw, apart from the drawing (zoo/lab/report/plots.py) so that tests can check them:
each arm's seeds with the 95% t-interval of their mean, and each paired claim check's per-seed differences with the
interval it was decided on and the band it tests (claims.rule_of). A check whose arms ran different seeds gets no
panel: it was compared by a Welch interval."""

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
    """One arm's per-seed values, their mean and its 95% t-interval (None with one seed or a non-finite one)."""

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
    """A paired claim check seed by seed: `differences[i]` is a - b on `seeds[i]` (log a - log b with a `factor`;
    (a - b) - (c - d) for a difference in differences, whose `band` is then a one-sided line, not a band around 0)."""

    check: str
    a: str
    b: str
    unit: str
    seeds: list[str]
    differences: list[float]
    mean: float | None
    interval: tuple[float, float] | None  # None, with `note`, when there is none
    band: float | None
    band_label: str
    claimed: str
    note: str = ""
    c: str = ""
    d: str = ""


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
    """The check's per-seed differences; None when it is not a paired claim check or a point is not in the run."""
    if check.get("kind", "claim") != "claim" or check.get("expect") not in (*TWO_ARMS, "diff_in_diff"):
        return None
    name = check.get("name", f"check {index}")
    keys = [select(sweep.points, s, f"lab.checks[{index}] ('{name}')") for s in check["points"]]
    if None in keys:
        return None
    if check["expect"] == "diff_in_diff":
        return _diff_in_diff(sweep, check, name, keys)
    metrics = [check["metric"], check.get("metric_b") or check["metric"]]
    samples = sweep.samples(metrics)
    a, b = (samples.get(k, {}).get(m) for k, m in zip(keys, metrics))
    if not a or not b or set(a) != set(b):
        return None
    seeds = sorted(a)  # the order stats.compare pairs them in
    labels = [sweep.label(k) + (f" [{m}]" if m != o else "") for k, m, o in zip(keys, metrics, metrics[::-1])]
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
    claimed = CLAIMED[check["expect"]]
    return PairedDifference(name, *labels, unit, seeds, differences, mean, interval, band, band_label, claimed, note)


def _diff_in_diff(sweep: Sweep, check: dict, name: str, keys: list) -> PairedDifference | None:
    """(a - b) - (c - d) on each seed all four points ran, with the interval the check is decided on; None with
    fewer than two such seeds."""
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
    claimed = CLAIMED["diff_in_diff"]
    return PairedDifference(
        name, *labels[:2], unit, seeds, differences, mean, interval, band, band_label, claimed, note, *labels[2:]
    )


def paired_differences(sweep: Sweep, grid: Sweep | None = None) -> list[PairedDifference]:
    """Every paired claim check of the question, in order; a check read on the whole grid of a tuned question
    (`grid: true`, zoo/lab/decide/tuning.py) is drawn from `grid`."""
    checks = sweep.lab.get("checks", [])
    found = (paired_difference(grid if grid and c.get("grid") is True else sweep, c, i) for i, c in enumerate(checks))
    return [d for d in found if d is not None]
