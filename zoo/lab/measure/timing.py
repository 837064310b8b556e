"""Timing arms the way the benchmark does (benchmarks/harness.py uses it too): interleaved round-robin in one
process, the order rotated each round, after dropped warm-up rounds; each arm's median with its spread (interquartile
range over the median). A spread above SPREAD_LIMIT means the machine was shared: the timing is `contended`, and no
claim check decides on it. `load()` records the load average beside, deciding nothing. The clock and the device sync
are arguments so that tests can drive the timer."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from statistics import median, quantiles

SPREAD_LIMIT = 0.25  # IQR / median above this: the machine was shared while the arms ran
# The companions of a timing metric `m` in a job's metrics: what the claim checks and the report read.
SPREAD, CONTENDED, LIMIT = "/spread", "/contended", "/spread_limit"


@dataclass(frozen=True)
class Timing:
    """One arm's timed calls (seconds), in the order they ran."""

    times: tuple[float, ...]
    limit: float = SPREAD_LIMIT

    @property
    def median(self) -> float:
        return median(self.times)

    @property
    def spread(self) -> float:
        """Interquartile range over the median (0 with fewer than 2 times)."""
        if len(self.times) < 2 or self.median <= 0:
            return 0.0
        q1, _, q3 = quantiles(self.times, n=4, method="inclusive")
        return (q3 - q1) / self.median

    @property
    def contended(self) -> bool:
        return self.spread > self.limit

    def metrics(self, name: str, scale: float = 1000.0) -> dict[str, float]:
        """`name`: the median (in ms by default), with its spread, the flag and the limit as companions."""
        return {
            name: scale * self.median,
            name + SPREAD: self.spread,
            name + CONTENDED: float(self.contended),
            name + LIMIT: self.limit,
        }


def derived(name: str, value: float, *sources: Timing) -> dict[str, float]:
    """`name`: a number computed from timings, with the largest spread of its sources, contended when any was."""
    worse = max(sources, key=lambda t: t.spread)
    return {
        name: value,
        name + SPREAD: worse.spread,
        name + CONTENDED: float(any(t.contended for t in sources)),
        name + LIMIT: worse.limit,
    }


def ratio(name: str, a: Timing, b: Timing) -> dict[str, float]:
    """`name`: a's median over b's, with companions (derived)."""
    return derived(name, a.median / b.median, a, b)


def interleave(
    arms: Mapping[str, Callable[[], object]],
    *,
    rounds: int = 5,
    warmup: int = 1,
    repeats: int = 1,
    limit: float = SPREAD_LIMIT,
    clock: Callable[[], float] = time.perf_counter,
    sync: Callable[[], None] | None = None,
) -> dict[str, Timing]:
    """Time every arm in every round, the order rotated by one each round; the warm-up rounds run and are dropped.
    `sync` runs before each clock reading (a CUDA synchronize: the clock must not stop before the kernels do)."""
    if rounds < 1 or warmup < 0 or repeats < 1:
        raise ValueError(f"rounds ({rounds}) and repeats ({repeats}) must be >= 1, warmup ({warmup}) >= 0")
    names = list(arms)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(warmup + rounds):
        for i in ((r + j) % len(names) for j in range(len(names))):
            for _ in range(repeats):
                if sync:
                    sync()
                start = clock()
                arms[names[i]]()
                if sync:
                    sync()
                if r >= warmup:
                    times[names[i]].append(clock() - start)
    return {name: Timing(tuple(t), limit) for name, t in times.items()}


def load() -> dict[str, float]:
    """The 1-minute load average beside the cores this process may use (where the system reports them)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        return {"lab/load_avg": os.getloadavg()[0], "lab/cores": float(cores)}
    except OSError:
        return {"lab/cores": float(cores)}


def companions(metrics: list[str]) -> list[str]:
    """The names under which a timing metric's spread, flag and limit are recorded."""
    return [m + suffix for m in metrics for suffix in (SPREAD, CONTENDED, LIMIT)]
