"""A claim is a list of checks on measured points; the verdict is how many of them the numbers support.

A point is one setting of the swept parameters (seeds aside); its value of a metric is the mean and the
spread (sample standard deviation) over its seeds. A check compares points on one metric:

    {name, metric, points: [selector, ...], expect, margin: 2.0, factor: null, tolerance: 0.02}

- `selector`: {swept parameter: value, ...}; it must pick exactly one point (a subset of the parameters is enough).
- `expect`: `less` / `greater` (first point vs second), `increasing` / `decreasing` (along the points, every
  neighbour pair), `similar` (two points), `interior_min` / `interior_max` (the best point is neither end),
  `above` / `below` (one point against a fixed `threshold`).
- `metric_b`: for two-point checks, the second point's metric when it differs (e.g. one model's loss beyond the
  training length vs its loss at the training length: the same point twice, two metrics).
- A difference counts only when it exceeds `margin` times the spread of the difference,
  sqrt(sd_a^2 + sd_b^2), so seed noise never decides a check; `factor` additionally asks for a ratio
  (b / a >= factor for `less`); `similar` holds when |a - b| <= max(tolerance * |a|, margin * spread).
  A point measured with one seed has no spread, so a comparison with it decides nothing.
- A non-finite value (a run that diverged) decides nothing, unless the check says `diverged: worst` (for a metric
  where lower is better, e.g. a loss): then a point where any seed diverged counts as worse than every finite one,
  and never as similar to one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import mean, stdev

EXPECTATIONS = (
    "less",
    "greater",
    "increasing",
    "decreasing",
    "similar",
    "interior_min",
    "interior_max",
    "above",
    "below",
)
VERDICTS = ("holds", "holds in part", "does not hold here", "not measured")


@dataclass
class Stat:
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
        return f"{self.mean:.4g} ± {self.sd:.2g}" if math.isfinite(self.mean) else "non-finite"


@dataclass
class CheckResult:
    name: str
    holds: bool | None  # None: some point was not measured
    detail: str
    pairs: list[str] = field(default_factory=list)


def check_config(check: dict, index: int) -> None:
    """One-line errors for a malformed check (config file mistakes, found before anything runs)."""
    where = f"lab.checks[{index}]" + (f" ('{check['name']}')" if isinstance(check, dict) and "name" in check else "")
    if not isinstance(check, dict) or "metric" not in check or "points" not in check or "expect" not in check:
        raise ValueError(f"{where}: a check needs metric, points and expect")
    if check["expect"] not in EXPECTATIONS:
        raise ValueError(f"{where}: unknown expect '{check['expect']}'; choose one of {', '.join(EXPECTATIONS)}")
    n, expect = len(check["points"]), check["expect"]
    two = expect in ("less", "greater", "similar")
    need = 3 if expect.startswith("interior") else 1 if expect in ("above", "below") else 2
    if expect in ("above", "below") and (n != 1 or "threshold" not in check):
        raise ValueError(f"{where}: expect '{expect}' needs exactly 1 point and a threshold")
    if check.get("diverged") not in (None, "worst"):
        raise ValueError(f"{where}: diverged must be 'worst' (or absent), got {check['diverged']!r}")
    if (two and n != 2) or n < need:
        raise ValueError(f"{where}: expect '{expect}' needs {'exactly' if two else 'at least'} {need} points, got {n}")


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
    """One spelling per value: a swept boolean may be written True or true, a selector's null is YAML's None.
    The string "none" (attn_scale=none, qk_proj=none, positions=none) stays distinct from null."""
    if isinstance(value, bool):
        return "true" if value else "false"
    text = "null" if value is None else str(value)
    return text.lower() if text.lower() in ("true", "false", "null") else text


def _pair(
    a: Stat,
    b: Stat,
    direction: str,
    margin: float,
    factor: float | None,
    tolerance: float,
    b_is_threshold: bool = False,
) -> tuple[bool | None, str]:
    """Does a relate to b as `direction` says, beyond the seed spread? None: undecided (a diverged run's metric is
    not finite; the check neither confirms nor refutes the claim, and lab/diverged in the table shows it)."""
    if math.isnan(a.mean) or math.isnan(b.mean) or (math.isinf(a.mean) and math.isinf(b.mean)):
        return None, f"{a} vs {b}: undecided, a non-finite value (a run diverged)"
    if direction == "similar" and (math.isinf(a.mean) or math.isinf(b.mean)):
        # inf - x is inf and tolerance * inf is inf: the arithmetic would call a diverged run "similar"
        return False, f"{a} vs {b}: a diverged point is not similar to a finite one"
    # One seed has a spread of 0, and any difference would "exceed" it: the seeds' noise is unknown, not absent.
    # (A diverged point counted as worst is infinitely worse, whatever the spread.)
    seeds = a.n if b_is_threshold else min(a.n, b.n)
    if seeds < 2 and not (math.isinf(a.mean) or math.isinf(b.mean)):
        return None, f"{a} vs {b}: undecided, one seed (a spread needs at least 2 seeds per point)"
    spread = math.hypot(a.sd, b.sd)
    diff = b.mean - a.mean
    if direction == "similar":
        allowed = max(tolerance * abs(a.mean), margin * spread)
        return abs(
            diff
        ) <= allowed, f"{a} vs {b}: |diff| {abs(diff):.3g} {'<=' if abs(diff) <= allowed else '>'} {allowed:.3g}"
    if direction == "greater":
        diff = -diff
    ok = diff > margin * spread
    text = f"{a} vs {b}: diff {diff:+.3g} {'>' if ok else '<='} {margin:g} x spread {spread:.2g}"
    if factor is not None:
        small, large = (a.mean, b.mean) if direction == "less" else (b.mean, a.mean)
        ratio = large / small if small > 0 else float("inf")
        ok = ok and ratio >= factor
        text += f", ratio {ratio:.3g} {'>=' if ratio >= factor else '<'} {factor:g}"
    return ok, text


def evaluate(
    check: dict, stats: dict[tuple, dict[str, Stat]], points: dict[tuple, dict[str, str]], index: int
) -> CheckResult:
    check_config(check, index)
    name = check.get("name", f"check {index}")
    metric, expect = check["metric"], check["expect"]
    margin, factor, tol = float(check.get("margin", 2.0)), check.get("factor"), float(check.get("tolerance", 0.02))
    keys = [select(points, sel, f"lab.checks[{index}] ('{name}')") for sel in check["points"]]
    metrics = [metric] * len(keys)
    if check.get("metric_b") and len(keys) == 2:
        metrics[1] = check["metric_b"]
    values = [stats.get(k, {}).get(m) if k is not None else None for k, m in zip(keys, metrics)]
    if any(v is None for v in values):
        return CheckResult(
            name, None, f"not measured in this run ({', '.join(dict.fromkeys(metrics))} missing for some point)"
        )
    if check.get("diverged") == "worst":
        values = [v if math.isfinite(v.mean) else Stat(math.inf, 0.0, v.n) for v in values]
    if expect in ("above", "below"):
        fixed = Stat(float(check["threshold"]), 0.0, 1)
        direction = "greater" if expect == "above" else "less"
        ok, text = _pair(values[0], fixed, direction, margin, factor, tol, b_is_threshold=True)
        text = text.replace(f"vs {fixed}", f"vs threshold {fixed.mean:g}")
        return CheckResult(name, ok, text, [text])
    if expect in ("less", "greater", "similar"):
        ok, text = _pair(values[0], values[1], expect, margin, factor, tol)
        return CheckResult(name, ok, text, [text])
    if expect in ("increasing", "decreasing"):
        direction = "less" if expect == "increasing" else "greater"
        results = [_pair(a, b, direction, margin, factor, tol) for a, b in zip(values, values[1:])]
        ok = None if any(r[0] is None for r in results) else all(r[0] for r in results)
        return CheckResult(
            name, ok, f"{sum(r[0] is True for r in results)}/{len(results)} steps {expect}", [r[1] for r in results]
        )
    # interior_min / interior_max: the best point is inside, and clearly better than both ends
    sign = 1 if expect == "interior_min" else -1
    if not all(math.isfinite(v.mean) for v in values):
        return CheckResult(name, None, "undecided: a non-finite value (a run diverged)")
    best = min(range(len(values)), key=lambda i: sign * values[i].mean)
    if best in (0, len(values) - 1):
        return CheckResult(name, False, f"the best point is an end (#{best + 1} of {len(values)}: {values[best]})")
    direction = "less" if sign == 1 else "greater"
    ends = [_pair(values[best], values[end], direction, margin, None, tol) for end in (0, len(values) - 1)]
    ok = None if any(r[0] is None for r in ends) else all(r[0] for r in ends)
    return CheckResult(
        name,
        ok,
        f"best is point #{best + 1} ({values[best]}); vs the ends: " + "; ".join(r[1] for r in ends),
        [r[1] for r in ends],
    )


def verdict(results: list[CheckResult]) -> str:
    measured = [r for r in results if r.holds is not None]
    if not measured:
        return "not measured"
    held = sum(r.holds for r in measured)
    if held == len(measured):
        return "holds"
    return "does not hold here" if held == 0 else "holds in part"
