"""The statistics behind the lab's checks: an effect with its 95% confidence interval, one-sided tests against a
boundary, TOST for equivalence, McNemar's score test for accuracies on the same examples, and Holm's correction.

An `Effect` estimates `b - a` (or `a - threshold`), oriented by the caller so that positive is what the claim
predicts; two arms that ran the same seeds share their data order, so their per-seed differences are paired."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize as _scipy_optimize
from scipy import stats as _scipy

CONFIDENCE = 0.95  # the interval shown with every effect
ALPHA = 0.025  # each one-sided test: a claim is supported when its 95% interval clears the boundary
MIN_SEEDS = 5  # fewer seeds per point decide nothing: the spread itself is too uncertain


@dataclass(frozen=True)
class Effect:
    """An estimated effect, its standard error and the t distribution that describes its error."""

    estimate: float
    se: float
    df: float
    n: int  # seeds behind it (pairs for a paired test, the smaller arm otherwise)
    method: str  # "paired t", "Welch t", "one-sample t", "McNemar"

    def interval(self, confidence: float = CONFIDENCE) -> tuple[float, float]:
        if self.se == 0.0:  # every seed gave the same number: the estimate is exact as far as the runs can tell
            return self.estimate, self.estimate
        half = float(_scipy.t.ppf(0.5 + confidence / 2, self.df)) * self.se
        return self.estimate - half, self.estimate + half

    def p_above(self, boundary: float) -> float:
        """One-sided p-value of H0: effect <= boundary (small: the effect is above the boundary)."""
        return self._tail(self.estimate - boundary)

    def p_below(self, boundary: float) -> float:
        """One-sided p-value of H0: effect >= boundary (small: the effect is below the boundary)."""
        return self._tail(boundary - self.estimate)

    def _tail(self, distance: float) -> float:
        if self.se == 0.0:  # no spread: an exact difference is either beyond the boundary or not
            return 0.0 if distance > 0 else 1.0
        return float(_scipy.t.sf(distance / self.se, self.df))

    def tost(self, bound: float) -> float:
        """p-value of equivalence within (-bound, +bound): the larger of the two one-sided tests (both must reject)."""
        return max(self.p_above(-bound), self.p_below(bound))

    def oriented(self, sign: float) -> Effect:
        return Effect(sign * self.estimate, self.se, self.df, self.n, self.method)


def _array(values) -> np.ndarray:
    return np.asarray(list(values), dtype=float)


def paired(a, b) -> Effect:
    """mean(b - a) over seeds that both arms ran."""
    diff = _array(b) - _array(a)
    n = len(diff)
    return Effect(float(diff.mean()), float(diff.std(ddof=1) / math.sqrt(n)), n - 1, n, "paired t")


def welch(a, b) -> Effect:
    """mean(b) - mean(a) for arms of unmatched seeds (Welch-Satterthwaite degrees of freedom)."""
    a, b = _array(a), _array(b)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = math.sqrt(va + vb)
    # With both variances 0 the df formula is 0/0; any df will do since se = 0 makes every test exact.
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)) if se > 0 else float(len(a) + len(b) - 2)
    return Effect(float(b.mean() - a.mean()), se, float(df), min(len(a), len(b)), "Welch t")


def one_sample(a, reference: float) -> Effect:
    """mean(a) - reference: one arm against a fixed number."""
    a = _array(a)
    n = len(a)
    return Effect(float(a.mean() - reference), float(a.std(ddof=1) / math.sqrt(n)), n - 1, n, "one-sample t")


def compare(a: dict, b: dict) -> Effect:
    """b - a for two arms given as {seed: value}: paired when they ran the same seeds, Welch otherwise."""
    if set(a) == set(b):
        seeds = sorted(a)
        return paired([a[s] for s in seeds], [b[s] for s in seeds])
    return welch(list(a.values()), list(b.values()))


def paired_contrast(points: list[dict], weights: list[float]) -> Effect:
    """sum(weight_i x point_i) seed by seed over the seeds every point ran, then their one-sample t interval: e.g. a
    difference in differences, (a - b) - (c - d), with weights (1, -1, -1, 1)."""
    seeds = sorted(set.intersection(*(set(p) for p in points)))
    per_seed = [sum(w * p[s] for w, p in zip(weights, points)) for s in seeds]
    effect = one_sample(per_seed, 0.0)
    return Effect(effect.estimate, effect.se, effect.df, effect.n, "paired contrast t")


def _null_discordance(b: int, c: int, n: int, delta: float) -> float:
    """The discordance p_b + p_c that best explains counts (b, c) among n examples if the true difference
    p_c - p_b were `delta`: the restricted maximum likelihood of the multinomial (b, c, concordant), the positive
    root of 2n x^2 - (b + c - delta (2n + b - c)) x - b delta (1 - delta) = 0 for x = p_b (Tango 1998, eq. 3)."""
    linear = b + c - delta * (2 * n + b - c)
    x = (linear + math.sqrt(linear**2 + 8 * n * b * delta * (1 - delta))) / (4 * n)
    return 2 * x + delta


@dataclass(frozen=True)
class McNemar(Effect):
    """The difference in accuracy (c - b) / n between two arms that classified the same n examples, pooled over seeds:
    b examples only the first arm got right, c only the second (se: the plain estimate's, shown; df: inf).

    Score tests (Tango 1998) rather than the exact binomial test, which tests only a difference of zero: a check
    tests against its smallest effect. At zero the statistic is McNemar's (c - b) / sqrt(b + c). The interval inverts
    the same tests. Pooling the seeds overestimates the variance (the tests err on the safe side); they condition on
    the trained models, which is why claims.py asks the seed-level t test too."""

    b: int = 0
    c: int = 0
    total: int = 0  # examples over all seeds (each counted once per seed)

    def _score(self, delta: float) -> float:
        """(estimate - delta) / its standard error if the true difference were delta (signed; +-inf at an end)."""
        discordance = _null_discordance(self.b, self.c, self.total, delta)
        variance = max(0.0, (discordance - delta**2) / self.total)
        distance = self.estimate - delta
        if variance == 0.0:
            return 0.0 if distance == 0 else math.copysign(math.inf, distance)
        return distance / math.sqrt(variance)

    def p_above(self, boundary: float) -> float:
        if boundary >= 1.0:  # no difference in accuracy is larger than 1
            return 1.0
        return float(_scipy.norm.sf(self._score(max(boundary, -1.0))))

    def p_below(self, boundary: float) -> float:
        if boundary <= -1.0:
            return 1.0
        return float(_scipy.norm.cdf(self._score(min(boundary, 1.0))))

    def interval(self, confidence: float = CONFIDENCE) -> tuple[float, float]:
        """The differences that neither one-sided test at (1 - confidence) / 2 rejects."""
        tail = (1 - confidence) / 2

        def bound(p, end: float) -> float:
            # p moves monotonically from ~1 at the estimate to 0 at the end: where it crosses the tail, else the end
            if p(end) >= tail:
                return end
            return float(_scipy_optimize.brentq(lambda d: p(d) - tail, self.estimate, end, xtol=1e-10))

        edge = 1.0 - 1e-12  # the score's variance is 0 at exactly +-1
        return bound(self.p_above, -edge), bound(self.p_below, edge)

    def oriented(self, sign: float) -> McNemar:
        if sign > 0:
            return self
        estimate = -self.estimate + 0.0  # no difference reads 0, not -0
        return McNemar(estimate, self.se, self.df, self.n, self.method, b=self.c, c=self.b, total=self.total)


def mcnemar(pairs) -> McNemar:
    """Accuracy of arm b minus arm a, pooled over seeds. pairs: one (a, b) per seed, boolean arrays over the same
    examples in the same order."""
    b = c = total = seeds = 0
    for right_a, right_b in pairs:
        right_a, right_b = np.asarray(right_a, dtype=bool), np.asarray(right_b, dtype=bool)
        b += int(np.sum(right_a & ~right_b))
        c += int(np.sum(~right_a & right_b))
        total += len(right_a)
        seeds += 1
    estimate = (c - b) / total
    se = math.sqrt(max(0.0, (b + c) / total - estimate**2) / total)
    return McNemar(estimate, se, math.inf, seeds, "McNemar", b=b, c=c, total=total)


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjustment, in the input order: the i-th smallest p times (m - i), made non-decreasing."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted
