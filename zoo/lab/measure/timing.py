"""Timing several arms the way the benchmark does: interleaved in one process, repeated, median with its spread.

A time measured in one job and compared with a time measured in another job compares two moments of the machine as
much as two implementations: another process sharing the cores for a minute shows up as a slower arm. Interleaving
the arms round-robin in one process spreads such drift over every arm, and rotating the order each round keeps any
arm from always running first (right after a warm-up or a garbage collection).

- `interleave(arms)`: `warmup` rounds whose times are dropped, then `rounds` timed rounds; in round r the arms run in
  the order of the list rotated by r. Each arm is called `repeats` times in a row per round, every call timed.
- `Timing`: one arm's times, their median, and their spread: the interquartile range over the median. The machine
  is noisy (about ±15% between rounds when it is quiet); a spread above `limit` (SPREAD_LIMIT, 25%) means something
  else ran on the machine meanwhile, and the timing is `contended`: a claim check never decides on it
  (zoo/lab/decide/claims.py).
- `load()`: the 1-minute load average and the number of cores, reported beside the timings but not deciding anything
  (it lags by a minute and counts our own threads).

benchmarks/harness.py times its rows with `interleave` too; the clock and the device sync are arguments so that
tests can drive the timer with a fake clock.
"""

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
        """Interquartile range over the median (0 with fewer than 2 times: no spread seen, none claimed)."""
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
    """`name`: a number computed from timings, with companions: the largest spread of its sources, contended when any
    of them was (a check never decides on it then)."""
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


def rotations(n: int, rounds: int, start: int = 0) -> list[list[int]]:
    """The arms' order in each round: 0..n-1 rotated by the round's number, so each arm leads in turn."""
    return [[(r + i) % n for i in range(n)] for r in range(start, start + rounds)]


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
    """Time every arm in every round, round-robin in a rotated order; the warm-up rounds run and are dropped.
    `sync` runs before each clock reading (a CUDA synchronize: the clock must not stop before the kernels do)."""
    if rounds < 1 or warmup < 0 or repeats < 1:
        raise ValueError(f"rounds ({rounds}) and repeats ({repeats}) must be >= 1, warmup ({warmup}) >= 0")
    names = list(arms)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r, order in enumerate(rotations(len(names), warmup + rounds)):
        for i in order:
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
