"""The statistics behind the lab's checks: an effect with its 95% confidence interval, one-sided t tests against
a boundary, TOST for equivalence, and Holm's step-down correction.

Every test here is a t test on a handful of seeds: the seeds of one arm are independent runs, and two arms that
ran the same seeds share their data order (`data.seed`), so their per-seed differences are paired. Nothing here
knows about sweeps or configs (zoo/lab/claims.py turns checks into these calls).

Conventions: an `Effect` is the estimate of `b - a` (or of `a - threshold`), oriented by the caller so that a
positive value is the direction the claim predicts. One-sided p-values answer "how surprising is this estimate if
the true effect were at (or beyond) the boundary on the other side".

Not here yet: McNemar's test for accuracies on a fixed dev set would pair the two arms example by example and is
sharper than a t test over seeds, but the jobs record only the accuracy, not per-example predictions. Checked
against known cases in tests/test_lab_stats.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as _scipy

CONFIDENCE = 0.95  # the interval shown with every effect
ALPHA = 0.025  # each one-sided test: a claim is supported when its 95% interval clears the boundary
MIN_SEEDS = 5  # fewer seeds per point decide nothing: the spread itself is too uncertain


def t_quantile(probability: float, df: float) -> float:
    """The `probability` quantile of Student's t with `df` degrees of freedom (df may be fractional: Welch)."""
    return float(_scipy.t.ppf(probability, df))


def t_upper_tail(t: float, df: float) -> float:
    """P(T >= t) for Student's t with `df` degrees of freedom."""
    return float(_scipy.t.sf(t, df))


@dataclass(frozen=True)
class Effect:
    """An estimated effect, its standard error and the t distribution that describes its error."""

    estimate: float
    se: float
    df: float
    n: int  # seeds behind it (pairs for a paired test, the smaller arm otherwise)
    method: str  # "paired t", "Welch t", "one-sample t"

    def interval(self, confidence: float = CONFIDENCE) -> tuple[float, float]:
        if self.se == 0.0:  # every seed gave the same number: the estimate is exact as far as the runs can tell
            return self.estimate, self.estimate
        half = t_quantile(0.5 + confidence / 2, self.df) * self.se
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
        return t_upper_tail(distance / self.se, self.df)

    def tost(self, bound: float) -> float:
        """p-value of equivalence within (-bound, +bound): the larger of the two one-sided tests (both must reject)."""
        return max(self.p_above(-bound), self.p_below(bound))

    def oriented(self, sign: float) -> Effect:
        """The same effect measured the other way round (sign -1), or unchanged (sign +1)."""
        return Effect(sign * self.estimate, self.se, self.df, self.n, self.method)


def _sample(values) -> np.ndarray:
    array = np.asarray(list(values), dtype=float)
    if array.ndim != 1 or len(array) < 2:
        raise ValueError(f"a t interval needs at least 2 values, got {len(array)}")
    return array


def paired(a, b) -> Effect:
    """mean(b - a) over seeds that both arms ran: the shared data order cancels out of each difference."""
    diff = _sample(b) - _sample(a)
    n = len(diff)
    return Effect(float(diff.mean()), float(diff.std(ddof=1) / math.sqrt(n)), n - 1, n, "paired t")


def welch(a, b) -> Effect:
    """mean(b) - mean(a) for arms of unequal or unmatched seeds, without assuming equal variances
    (Welch-Satterthwaite degrees of freedom)."""
    a, b = _sample(a), _sample(b)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = math.sqrt(va + vb)
    # With both variances 0 the df formula is 0/0; any df will do since se = 0 makes every test exact.
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)) if se > 0 else float(len(a) + len(b) - 2)
    return Effect(float(b.mean() - a.mean()), se, float(df), min(len(a), len(b)), "Welch t")


def one_sample(a, reference: float) -> Effect:
    """mean(a) - reference: one arm against a fixed number (a threshold of the claim)."""
    a = _sample(a)
    n = len(a)
    return Effect(float(a.mean() - reference), float(a.std(ddof=1) / math.sqrt(n)), n - 1, n, "one-sample t")


def compare(a: dict, b: dict) -> Effect:
    """b - a for two arms given as {seed: value}: paired when they ran the same seeds, Welch otherwise."""
    if set(a) == set(b):
        seeds = sorted(a)
        return paired([a[s] for s in seeds], [b[s] for s in seeds])
    return welch(list(a.values()), list(b.values()))


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjustment: the i-th smallest p is multiplied by (m - i), and the adjusted values are made
    non-decreasing in that order, so comparing them with alpha controls the chance of any false rejection among the
    m tests at alpha, whatever their dependence. Returned in the input order."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted
