"""A claim is a list of checks on measured points; each check's outcome is read from a confidence interval, and the
question's verdict from its claim checks only (the rule in words: docs/lab.md, "How it works").

A check: {name, metric, points: [selector, ...], expect, kind: claim|sanity, smallest_effect, factor, tolerance,
threshold, metric_b, paper, diverged, may_not_learn}; a selector ({swept parameter: value}) picks exactly one point.
Each comparison estimates an effect oriented so that positive is what the claim predicts (zoo/lab/decide/stats.py),
and Holm's correction runs over the question's whole family of claim checks (decide)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from statistics import mean, stdev

from ..measure.timing import CONTENDED, LIMIT, SPREAD
from . import stats

EXPECTATIONS = ("less", "greater", "increasing", "decreasing", "similar", "interior_min", "interior_max")
EXPECTATIONS += ("above", "below", "diff_in_diff")
KINDS = ("claim", "sanity")
OUTCOMES = ("supported", "contradicted", "inconclusive")
VERDICTS = ("supported", "supported in part", "contradicted in part", "contradicted", "inconclusive")
# The smallest effect worth reporting when neither the check nor the question names one, by what the metric's name
# says it measures (first match wins): 0.5 BLEU, half an accuracy point (accuracies are fractions), 0.01 nats.
SMALLEST_EFFECT = (("bleu", 0.5), ("acc", 0.005), ("loss", 0.01))
DEFAULT_TOLERANCE = 0.02  # relative bound of a `similar` check that states neither a tolerance nor a smallest effect


@dataclass
class Stat:
    """Mean and sample standard deviation over seeds: what the table shows."""

    mean: float
    sd: float
    n: int

    @classmethod
    def of(cls, values: list[float]) -> Stat:
        finite = all(math.isfinite(v) for v in values)
        m = mean(values) if finite else float("nan")
        sd = stdev(values) if finite and len(values) > 1 else 0.0
        return cls(m, sd, len(values))

    def __str__(self) -> str:
        if self.mean == math.inf:
            return "diverged (counted as worst)"
        if self.sd == 0 and float(self.mean).is_integer() and abs(self.mean) >= 1e4:  # ints from JSON too
            # a count the same on every seed (lab/params): in full, as four digits would hide a match of 0.03%
            return f"{int(self.mean):,} ± 0"
        return f"{self.mean:.4g} ± {self.sd:.2g}" if math.isfinite(self.mean) else "non-finite"


PER_EXAMPLE_METRICS = ("val/acc",)  # a check on one of these says why it fell back to the t test


class Seeds(dict):
    """A point's values of a metric, {seed: value}, with the seeds' per-example records (McNemar's test)."""

    def __init__(self, values: dict, metric: str = "", per_example: dict | None = None) -> None:
        super().__init__(values)
        self.metric = metric
        self.per_example = per_example or {}


@dataclass
class Step:
    """One comparison of a check: its text and its two one-sided p-values (None: decided nothing)."""

    text: str
    p_support: float | None = None
    p_contradict: float | None = None
    # (estimate, low, high) of each effect measured, oriented as the claim predicts (the outcome-against-budget table)
    effects: list[tuple[float, float, float]] = field(default_factory=list)


@dataclass
class CheckResult:
    name: str
    outcome: str  # one of OUTCOMES
    detail: str
    pairs: list[str] = field(default_factory=list)
    kind: str = "claim"
    p_support: float | None = None  # before Holm's correction; None when no test could decide the check
    p_contradict: float | None = None
    effects: list[tuple[float, float, float]] = field(default_factory=list)  # Step.effects of every comparison
    unit: str = ""  # "log ratio" for a `factor` check: its effects are logs of ratios


def check_config(check: dict, index: int) -> None:
    """One-line errors for a malformed check (config file mistakes, found before anything runs)."""
    where = f"lab.checks[{index}]" + (f" ('{check['name']}')" if isinstance(check, dict) and "name" in check else "")
    if not isinstance(check, dict) or "metric" not in check or "points" not in check or "expect" not in check:
        raise ValueError(f"{where}: a check needs metric, points and expect")
    if check["expect"] not in EXPECTATIONS:
        raise ValueError(f"{where}: unknown expect '{check['expect']}'; choose one of {', '.join(EXPECTATIONS)}")
    n, expect = len(check["points"]), check["expect"]
    two = expect in ("less", "greater", "similar")
    if expect == "diff_in_diff" and n != 4:
        raise ValueError(f"{where}: expect 'diff_in_diff' needs exactly 4 points (a, b, c, d: is a - b > c - d?)")
    if expect == "diff_in_diff" and (check.get("diverged") or check.get("factor") is not None or check.get("metric_b")):
        raise ValueError(f"{where}: expect 'diff_in_diff' takes neither diverged, factor nor metric_b; remove them")
    need = 3 if expect.startswith("interior") else 1 if expect in ("above", "below") else 2
    if expect in ("above", "below") and (n != 1 or "threshold" not in check):
        raise ValueError(f"{where}: expect '{expect}' needs exactly 1 point and a threshold")
    if check.get("diverged") not in (None, "worst"):
        raise ValueError(f"{where}: diverged must be 'worst' (or absent), got {check['diverged']!r}")
    if check.get("kind", "claim") not in KINDS:
        raise ValueError(f"{where}: kind must be one of {', '.join(KINDS)}, got {check['kind']!r}")
    if check.get("paper") not in (None, True, False):
        raise ValueError(f"{where}: paper must be true (the check restates the cited paper's claim) or false")
    if check.get("paper") and check.get("kind") == "sanity":
        raise ValueError(f"{where}: a sanity check tests the implementation, not the paper's claim: drop paper: true")
    if check.get("tolerance") is not None and check.get("kind", "claim") == "claim":
        raise ValueError(
            f"{where}: a claim check's 'similar' is bounded by its smallest effect (smallest_effect, or "
            "lab.smallest_effect for the metric), the unit its directional checks use; tolerance is for sanity checks"
        )
    effect = check.get("smallest_effect")
    if effect is not None and (not isinstance(effect, (int, float)) or effect < 0):
        raise ValueError(f"{where}: smallest_effect must be a number >= 0, got {effect!r}")
    if check.get("factor") is not None and not (isinstance(check["factor"], (int, float)) and check["factor"] > 0):
        raise ValueError(f"{where}: factor must be a number > 0, got {check['factor']!r}")
    if (two and n != 2) or n < need:
        raise ValueError(f"{where}: expect '{expect}' needs {'exactly' if two else 'at least'} {need} points, got {n}")
    spared = check.get("may_not_learn")
    if spared is not None:
        if check.get("kind", "claim") != "claim":
            raise ValueError(f"{where}: may_not_learn is for claim checks (a sanity check ignores learning); remove it")
        if not isinstance(spared, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n for i in spared
        ):
            raise ValueError(f"{where}: may_not_learn must list indices of the check's points (0 to {n - 1})")
        if len(set(spared)) >= n:
            raise ValueError(f"{where}: may_not_learn lists every point; at least one must still have to learn")


def smallest_effect(check: dict, lab: dict | None = None) -> float:
    """The check's own value, else the question's for the metric, else the default for the metric's kind."""
    if check.get("smallest_effect") is not None:
        return float(check["smallest_effect"])
    per_metric = (lab or {}).get("smallest_effect") or {}
    if check["metric"] in per_metric:
        return float(per_metric[check["metric"]])
    name = check["metric"].lower()
    return next((value for word, value in SMALLEST_EFFECT if word in name), 0.0)


def matches(params: dict[str, str], selector: dict) -> bool:
    """Do a point's (or a job's) parameters agree with `selector`?"""
    return all(canonical_value(params.get(str(k), "<unset>")) == canonical_value(v) for k, v in selector.items())


def select(points: dict[tuple, dict[str, str]], selector: dict, where: str) -> tuple | None:
    """The one point whose parameters agree with `selector`; None when it was not part of this run."""
    found = [key for key, params in points.items() if matches(params, selector)]
    if len(found) > 1:
        wanted = {str(k): canonical_value(v) for k, v in selector.items()}
        raise ValueError(f"{where}: selector {wanted} matches {len(found)} points; name more parameters")
    return found[0] if found else None


def canonical_value(value) -> str:
    """One spelling per value (True/true, None/null); the string "none" stays distinct from null."""
    if isinstance(value, bool):
        return "true" if value else "false"
    text = "null" if value is None else str(value)
    return text.lower() if text.lower() in ("true", "false", "null") else text


@dataclass
class Rule:
    """What a check asks of each comparison."""

    boundary: float  # the smallest effect (or log factor) a supported claim must clear
    bound: float | None  # `similar`: the equivalence bound (None: use the tolerance relative to the first point)
    tolerance: float | None
    factor: float | None
    worst: bool  # diverged: worst


def rule_of(check: dict, lab: dict | None = None) -> Rule:
    effect = smallest_effect(check, lab)
    tolerance = check.get("tolerance")
    return Rule(
        boundary=math.log(check["factor"]) if check.get("factor") is not None else effect,
        # a claim's `similar` is bounded by the smallest effect, in the units of the directional checks; a sanity
        # check's stated tolerance is relative to the first point (parameter counts matched within 0.1%)
        bound=None if tolerance is not None or not effect else effect,
        tolerance=float(tolerance) if tolerance is not None else DEFAULT_TOLERANCE,
        factor=check.get("factor"),
        worst=check.get("diverged") == "worst",
    )


def equivalence_bound(rule: Rule, a: dict) -> float:
    return rule.bound if rule.bound is not None else (rule.tolerance or 0.0) * abs(mean(a.values()))


def _shown(values: dict) -> str:
    return str(Stat.of(list(values.values())))


def _seed_shortage(n: int) -> str:
    have = "one seed" if n == 1 else f"{n} seeds"
    return f"inconclusive: {have} per point, a supported or contradicted outcome needs at least {stats.MIN_SEEDS}"


def _diverged_step(a: dict, b: dict | None, direction: str) -> Step | None:
    """With `diverged: worst`: a point with a non-finite seed is worse than every finite one (None: neither is)."""
    bad_a = not all(math.isfinite(v) for v in a.values())
    bad_b = b is not None and not all(math.isfinite(v) for v in b.values())
    if not (bad_a or bad_b):
        return None
    if bad_a and bad_b:
        return Step("both points diverged: nothing to compare")
    if direction == "similar":
        return Step("a diverged point is not similar to a finite one", 1.0, 0.0)
    # "less": the claim is that a is the lower one, so it holds exactly when b diverged (a threshold is finite)
    claim_true = bad_b if direction == "less" else bad_a
    text = f"{'second' if bad_b else 'first'} point diverged (counted as worst)"
    return Step(text, 0.0, 1.0) if claim_true else Step(text, 1.0, 0.0)


def _per_example_pairs(a: Seeds, b: Seeds) -> tuple[list | None, str]:
    """Each paired seed's two correctness vectors, for McNemar; (None, why not), or (None, "") for another metric."""
    metric = a.metric
    if metric != b.metric or not (metric in PER_EXAMPLE_METRICS or a.per_example):
        return None, ""
    if set(a) != set(b):
        return None, "the points ran different seeds"
    records = [(a.per_example.get(s), b.per_example.get(s)) for s in sorted(a)]
    lacking = [s for s, (x, y) in zip(sorted(a), records) if x is None or y is None]
    if len(lacking) == len(records):  # e.g. a sweep run before the jobs recorded them
        return None, "no job recorded which dev examples it got right"
    if lacking:
        return None, f"no per-example record for seed(s) {', '.join(map(str, lacking))}"
    if any(x.examples != y.examples or x.n != y.n for x, y in records):
        return None, "the points' records cover different dev examples"
    pairs = []
    for s, (x, y) in zip(sorted(a), records):
        vectors = x.correct(), y.correct()
        # the vector must be the accuracy the seed reports (sweep.py checked the record's own number; this, the file)
        if any(v is None or abs(float(v.mean()) - value) > 1e-6 for v, value in zip(vectors, (a[s], b[s]))):
            return None, f"the per-example record of seed {s} is unreadable or not its {metric}"
        pairs.append(vectors)
    return pairs, ""


def _mcnemar_step(a: dict, b: dict, direction: str, rule: Rule, pairs: list) -> Step:
    """McNemar's test pooled over the paired seeds, with the seed-level t interval beside it: both must agree."""
    sign = 1 if direction == "less" else -1  # as _effect_step: positive is what the claim says
    pooled = stats.mcnemar(pairs)
    effect = pooled.oriented(sign)
    low, high = effect.interval()
    seed_level = stats.compare(a, b).oriented(sign)
    t_low, t_high = seed_level.interval()
    n_seeds = pooled.n
    text = (
        f"effect {effect.estimate:+.3g} [95% CI {low:+.3g}, {high:+.3g}] (McNemar, pooled over {n_seeds} seeds: "
        f"b={pooled.b}, c={pooled.c} of {pooled.total} examples; b: only the first point right, c: only the second)"
    )
    if rule.boundary:
        text += f", smallest effect {rule.boundary:g}"
    text += (
        f"; and the seed-level {seed_level.method}: {seed_level.estimate:+.3g} [95% CI {t_low:+.3g}, {t_high:+.3g}], "
        f"{seed_level.n} seeds; both must agree"
    )
    # McNemar conditions on the trained models (one badly trained seed would decide it): an intersection-union test
    p_support = max(effect.p_above(rule.boundary), seed_level.p_above(rule.boundary))
    p_contradict = max(effect.p_below(rule.boundary), seed_level.p_below(rule.boundary))
    return Step(text, p_support, p_contradict, [(effect.estimate, low, high)])


def _effect_step(a: dict, b: dict | float, direction: str, rule: Rule) -> Step:
    """McNemar's test for accuracies recorded per example, else the t test; b a number for a threshold."""
    threshold = not isinstance(b, dict)
    fallback = ""
    if not threshold and rule.factor is None and direction in ("less", "greater"):
        pairs, fallback = _per_example_pairs(a, b)
        if pairs is not None:
            return _mcnemar_step(a, b, direction, rule, pairs)
    if rule.factor is not None and not threshold:
        if min([*a.values(), *b.values()]) <= 0:
            return Step("inconclusive: a ratio (factor) needs positive values")
        a = {s: math.log(v) for s, v in a.items()}
        b = {s: math.log(v) for s, v in b.items()}
    effect = stats.one_sample(list(a.values()), b) if threshold else stats.compare(a, b)
    # compare() measures b - a, one_sample() a - threshold: orient so that positive is what the claim says
    sign = {"less": 1, "greater": -1, "similar": 1}[direction]
    if threshold:
        sign = -sign
    effect = effect.oriented(sign)
    low, high = effect.interval()
    unit = "log ratio " if rule.factor is not None and not threshold else ""
    text = f"{unit}effect {effect.estimate:+.3g} [95% CI {low:+.3g}, {high:+.3g}] ({effect.method}, {effect.n} seeds)"
    measured = [(effect.estimate, low, high)]
    if direction == "similar":
        bound = equivalence_bound(rule, a)
        outside = min(1.0, 2 * min(effect.p_above(bound), effect.p_below(-bound)))
        return Step(f"{text}, equivalence bound ±{bound:.3g}", effect.tost(bound), outside, measured)
    boundary = 0.0 if threshold else rule.boundary
    if unit:
        text += f", ratio needed {rule.factor:g}"
    elif boundary:
        text += f", smallest effect {boundary:g}"
    if fallback:
        text += f"; t test, not McNemar: {fallback}"
    return Step(text, effect.p_above(boundary), effect.p_below(boundary), measured)


def _claim_step(a: dict, b: dict | float, direction: str, rule: Rule) -> Step:
    threshold = not isinstance(b, dict)
    shown = f"{_shown(a)} vs {'threshold ' + format(b, 'g') if threshold else _shown(b)}"
    step = _diverged_step(a, None if threshold else b, direction) if rule.worst else None
    if step is None and not all(math.isfinite(v) for v in [*a.values(), *([] if threshold else b.values())]):
        step = Step("inconclusive: a non-finite value (a run diverged)")
    n = len(a) if threshold else min(len(a), len(b))
    if step is None:
        if n < 2:  # no spread, no interval: the noise is unknown, not absent
            return Step(f"{shown}: {_seed_shortage(n)}")
        step = _effect_step(a, b, direction, rule)
    if n < stats.MIN_SEEDS and step.p_support is not None:
        return Step(f"{shown}: {step.text}; {_seed_shortage(n)}", effects=step.effects)
    return Step(f"{shown}: {step.text}", step.p_support, step.p_contradict, step.effects)


def _sanity_step(a: dict, b: dict | float, direction: str, rule: Rule) -> Step:
    """An implementation check holds on every run or it does not: every seed of a against every seed of b."""
    others = [b] if not isinstance(b, dict) else list(b.values())
    shown = f"{_shown(a)} vs {'threshold ' + format(b, 'g') if not isinstance(b, dict) else _shown(b)}"
    if not all(math.isfinite(v) for v in [*a.values(), *others]):
        return Step(f"{shown}: inconclusive, a non-finite value (a run diverged)")
    if direction == "similar":
        bound = equivalence_bound(rule, a)
        ok = all(abs(x - y) <= bound for x in a.values() for y in others)
    elif direction == "less":
        ok = max(a.values()) < min(others) / (rule.factor or 1.0) if rule.factor else max(a.values()) < min(others)
    else:
        ok = min(a.values()) > max(others) * (rule.factor or 1.0) if rule.factor else min(a.values()) > max(others)
    return Step(f"{shown}: {'every' if ok else 'not every'} seed", 0.0 if ok else 1.0, 1.0 if ok else 0.0)


DIFF_IN_DIFF = (1.0, -1.0, -1.0, 1.0)  # (a - b) - (c - d)


def _diff_in_diff_step(values: list[dict], rule: Rule, sanity: bool = False) -> Step:
    """Is a - b larger than c - d? Per seed, then their interval (a claim) or every seed (a sanity check)."""
    means = [mean(v.values()) if all(math.isfinite(x) for x in v.values()) else math.nan for v in values]
    shown = f"({_shown(values[0])} - {_shown(values[1])}) - ({_shown(values[2])} - {_shown(values[3])})"
    if not all(math.isfinite(m) for m in means):
        return Step(f"{shown}: inconclusive, a non-finite value (a run diverged): no difference to take")
    seeds = sorted(set.intersection(*(set(v) for v in values)))
    if sanity:
        per_seed = [sum(w * v[s] for w, v in zip(DIFF_IN_DIFF, values)) for s in seeds]
        ok = bool(per_seed) and min(per_seed) > 0
        return Step(f"{shown}: {'every' if ok else 'not every'} seed", 0.0 if ok else 1.0, 1.0 if ok else 0.0)
    if len(seeds) < 2:  # the effect is per seed: only seeds all four points ran count
        return Step(f"{shown}: {_seed_shortage(len(seeds))} (counting the seeds all four points ran)")
    effect = stats.paired_contrast(values, list(DIFF_IN_DIFF))
    low, high = effect.interval()
    text = (
        f"{shown}: difference in differences {effect.estimate:+.3g} [95% CI {low:+.3g}, {high:+.3g}] "
        f"({effect.method} over {effect.n} seeds all four points ran)"
    )
    if rule.boundary:
        text += f", smallest effect {rule.boundary:g}"
    measured = [(effect.estimate, low, high)]
    if effect.n < stats.MIN_SEEDS:
        return Step(f"{text}; {_seed_shortage(effect.n)}", effects=measured)
    return Step(text, effect.p_above(rule.boundary), effect.p_below(rule.boundary), measured)


def evaluate(
    check: dict,
    samples: dict[tuple, dict[str, dict[str, float]]],
    points: dict[tuple, dict[str, str]],
    index: int,
    lab: dict | None = None,
    per_example: dict | None = None,
) -> CheckResult:
    """The check's comparisons and their p-values before Holm's correction (decide() turns them into outcomes).
    samples: point -> metric -> {seed: value}; per_example: point -> metric -> {seed: sweep.PerExample}."""
    check_config(check, index)
    name, kind = check.get("name", f"check {index}"), check.get("kind", "claim")
    metric, expect = check["metric"], check["expect"]
    keys = [select(points, sel, f"lab.checks[{index}] ('{name}')") for sel in check["points"]]
    metrics = [metric, check.get("metric_b") or metric] if len(keys) == 2 else [metric] * len(keys)
    values = [samples.get(k, {}).get(m) if k is not None else None for k, m in zip(keys, metrics)]
    records = [(per_example or {}).get(k, {}).get(m) for k, m in zip(keys, metrics)]
    values = [Seeds(v, m, r) if v else v for v, m, r in zip(values, metrics, records)]
    if any(not v for v in values):
        missing = ", ".join(dict.fromkeys(metrics))
        return CheckResult(
            name, "inconclusive", f"not measured in this run ({missing} missing for some point)", [], kind
        )
    contended = _contended(samples, keys, metrics)
    if contended:
        return CheckResult(name, "inconclusive", contended, [], kind)
    rule = rule_of(check, lab)
    step = _sanity_step if kind == "sanity" else _claim_step

    if expect in ("increasing", "decreasing"):
        direction = "less" if expect == "increasing" else "greater"
        steps = [step(a, b, direction, rule) for a, b in zip(values, values[1:])]
        summary = f"{len(steps)} steps {expect}, each tested"
    elif expect.startswith("interior"):
        steps, summary = _interior(values, expect, step, rule)
    else:
        if expect in ("above", "below"):
            steps = [step(values[0], float(check["threshold"]), "greater" if expect == "above" else "less", rule)]
        elif expect == "diff_in_diff":
            steps = [_diff_in_diff_step(values, rule, sanity=kind == "sanity")]
        else:
            steps = [step(values[0], values[1], expect, rule)]
        summary = steps[0].text
    # all comparisons must hold for support (the largest p); any one contradicts (the smallest p, Bonferroni)
    p_support = p_contradict = None
    if all(s.p_support is not None for s in steps):
        p_support = max(s.p_support for s in steps)
        p_contradict = min(1.0, len(steps) * min(s.p_contradict for s in steps))
    effects = [e for s in steps for e in s.effects]
    unit = "log ratio" if check.get("factor") is not None and expect not in ("above", "below") else ""
    result = CheckResult(
        name, "inconclusive", summary, [s.text for s in steps], kind, p_support, p_contradict, effects, unit
    )
    if kind == "sanity":  # decided on every seed, no test and no correction
        outcome = "inconclusive" if p_support is None else "supported" if p_support == 0.0 else "contradicted"
        return replace(result, outcome=outcome)
    return result


def _contended(samples: dict, keys: list, metrics: list[str]) -> str | None:
    """Why a timing decides nothing (the largest flagged spread); None when no compared seed was contended."""
    flagged = []
    for key, metric in dict.fromkeys(zip(keys, metrics)):
        point = samples.get(key, {})
        for seed, flag in (point.get(metric + CONTENDED) or {}).items():
            if flag:
                spread = (point.get(metric + SPREAD) or {}).get(seed, float("nan"))
                flagged.append((spread, (point.get(metric + LIMIT) or {}).get(seed, float("nan"))))
    if not flagged:
        return None
    spread, limit = max(flagged)
    return f"timing contended (spread {100 * spread:.0f}% > {100 * limit:.0f}%, {len(flagged)} timing(s) flagged)"


def _interior(values: list[dict], expect: str, step, rule: Rule) -> tuple[list[Step], str]:
    """The best point (by its mean) is inside and better than both ends; an end that beats every inside point
    contradicts it."""
    if not all(math.isfinite(v) for point in values for v in point.values()):
        return [Step("inconclusive: a non-finite value (a run diverged)")], "a run diverged"
    sign = 1 if expect == "interior_min" else -1
    direction = "less" if sign == 1 else "greater"
    means = [mean(v.values()) for v in values]
    best = min(range(len(values)), key=lambda i: sign * means[i])
    last = len(values) - 1
    if best not in (0, last):
        steps = [step(values[best], values[end], direction, rule) for end in (0, last)]
        return steps, f"best is point #{best + 1} ({_shown(values[best])}); tested against both ends"
    beaten = [step(values[best], values[i], direction, rule) for i in range(1, last)]
    if any(s.p_support is None for s in beaten):
        return beaten, f"the best point is an end (#{best + 1})"
    reversed_steps = [Step(s.text, s.p_contradict, s.p_support) for s in beaten]
    p_contradict = max(s.p_contradict for s in reversed_steps)  # the end must beat all of them
    text = f"the best point is an end (#{best + 1}), tested against each inside point"
    flipped = Step(text, 1.0, p_contradict, [(-e, -high, -low) for s in beaten for e, low, high in s.effects])
    return [flipped], flipped.text + ": " + "; ".join(s.text for s in beaten)


def decide(results: list[CheckResult], alpha: float = stats.ALPHA) -> list[CheckResult]:
    """Outcomes of the claim checks after Holm's correction over the whole declared family: a check no test could
    decide counts with p = 1, so the family does not shrink with the data. Sanity checks stay as they are."""
    family = sum(r.kind == "claim" for r in results)
    tested = [i for i, r in enumerate(results) if r.kind == "claim" and r.p_support is not None]
    untested = [1.0] * (family - len(tested))
    support = stats.holm([results[i].p_support for i in tested] + untested)[: len(tested)]
    contradict = stats.holm([results[i].p_contradict for i in tested] + untested)[: len(tested)]
    decided = list(results)
    for i, ps, pc in zip(tested, support, contradict):
        r = results[i]
        outcome = "contradicted" if pc < alpha else "supported" if ps < alpha else "inconclusive"
        p_text = f"p(support) {r.p_support:.2g} -> Holm {ps:.2g}; p(contradict) {r.p_contradict:.2g} -> Holm {pc:.2g}"
        decided[i] = replace(r, outcome=outcome, detail=f"{r.detail} ({p_text})")
    return decided


def verdict(results: list[CheckResult]) -> str:
    claims = [r.outcome for r in results if r.kind == "claim"]
    supported, contradicted = claims.count("supported"), claims.count("contradicted")
    if not claims or supported == contradicted == 0:
        return "inconclusive"
    if supported == len(claims):
        return "supported"
    if contradicted == len(claims):
        return "contradicted"
    return "supported in part" if supported else "contradicted in part"
