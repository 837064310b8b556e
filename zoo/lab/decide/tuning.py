"""A parameter tuned per arm, compared best against best (`lab.tune: {param, metric, mode, show}`; docs/lab.md):
the points that differ only in `param` are collapsed, arm by arm, to the one with the best mean `metric` over the
seeds every value of the arm ran (a diverged run is the worst, a tie goes to the lower value, a choice at an end of the
grid is flagged). A check with `grid: true` is read on the whole grid."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from statistics import mean

from .claims import canonical_value
from .sweep import Sweep, short

MODES = ("min", "max")
KEYS = ("param", "metric", "mode", "show")
EDGE = "best at the edge of the grid: the optimum may lie outside"


@dataclass(frozen=True)
class Tune:
    param: str
    metric: str
    mode: str = "min"
    show: tuple[str, ...] = ()


def tune_config(lab: dict) -> Tune | None:
    """The question's `lab.tune`, checked (None when it has none): a one-line error naming what is wrong otherwise."""
    section = lab.get("tune")
    if section is None:
        return None
    where = f"lab question '{lab.get('name', '?')}': lab.tune"
    example = "e.g. {param: model.optimizer.lr, metric: val/loss, mode: min}"
    if not isinstance(section, dict):
        raise ValueError(f"{where} must be a mapping ({example}), got {type(section).__name__}")
    unknown = [k for k in section if k not in KEYS]
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(map(str, unknown))}; the keys are {', '.join(KEYS)}")
    for key in ("param", "metric"):
        if not isinstance(section.get(key), str) or not section[key]:
            what = "swept parameter" if key == "param" else "metric"
            raise ValueError(f"{where}.{key} must name a {what} ({example})")
    mode = section.get("mode", "min")
    if mode not in MODES:
        raise ValueError(f"{where}.mode must be min or max (is a lower or a higher {section['metric']} better?)")
    show = section.get("show") or []
    if not isinstance(show, list) or not all(isinstance(m, str) and m for m in show):
        raise ValueError(f"{where}.show must be a list of metric names, got {show!r}")
    for index, check in enumerate(lab.get("checks") or []):
        if not isinstance(check, dict) or check.get("grid") is True:
            continue
        for selector in check.get("points") or []:
            if isinstance(selector, dict) and section["param"] in selector:
                raise ValueError(
                    f"lab.checks[{index}] ('{check.get('name', index)}') selects on {section['param']}, the tuned "
                    "parameter (lab.tune); its arms are compared each at its best value: drop it from the selector, "
                    "or read the check on the whole grid (grid: true)"
                )
    return Tune(section["param"], section["metric"], mode, tuple(show))


@dataclass(frozen=True)
class Candidate:
    """One value of the tuned parameter in an arm: its point, its score (None: no value) and its seeds."""

    key: tuple
    value: str
    score: float | None
    seeds: tuple[str, ...]


@dataclass(frozen=True)
class Choice:
    """One arm's candidates in increasing value of the tuned parameter, and the chosen one."""

    arm: str  # the arm's parameters other than the tuned one, as a label
    candidates: tuple[Candidate, ...]
    chosen: Candidate | None  # None: no rate of the arm has a value of the metric
    compared_on: tuple[str, ...]  # the seeds the scores are means over (empty: each rate's own seeds)
    tie: bool = False

    @property
    def edge(self) -> bool:
        if self.chosen is None or len(self.candidates) < 2:
            return False
        return self.chosen.value in (self.candidates[0].value, self.candidates[-1].value)


def _ordered(values: list[str]) -> list[str]:
    try:
        return sorted(values, key=float)
    except ValueError:
        return sorted(values)


def _badness(score: float | None, mode: str) -> float:
    """Lower is better whatever the mode; a diverged (non-finite) score is worse than every finite one."""
    if score is None or not math.isfinite(score):
        return math.inf
    return score if mode == "min" else -score


def choose(values: dict[str, dict[str, float]], tune: Tune, arm: str, keys: dict[str, tuple]) -> Choice:
    """The best value for one arm. values: {rate: {seed: metric}} ({}: no value); keys: {rate: its point's key}."""
    rates = _ordered(list(values))
    measured = [r for r in rates if values[r]]
    shared = set.intersection(*(set(values[r]) for r in measured)) if measured else set()
    seeds = tuple(sorted(shared))
    candidates = []
    for rate in rates:
        own = values[rate]
        used = ([own[s] for s in seeds] if seeds else list(own.values())) if own else []
        score = (mean(used) if all(math.isfinite(v) for v in used) else math.nan) if used else None
        candidates.append(Candidate(keys[rate], rate, score, tuple(sorted(own))))
    ranked = sorted((c for c in candidates if c.score is not None), key=lambda c: _badness(c.score, tune.mode))
    if not ranked:
        return Choice(arm, tuple(candidates), None, seeds)
    best = _badness(ranked[0].score, tune.mode)
    tied = [c for c in ranked if _badness(c.score, tune.mode) == best]
    # sorted() is stable and the candidates are in increasing rate: the first of a tie is the lowest rate
    return Choice(arm, tuple(candidates), tied[0], seeds, tie=len(tied) > 1)


def arms_of(sweep: Sweep, param: str) -> dict[tuple, dict[str, tuple]]:
    """The sweep's points grouped into arms: {the arm's parameters but `param`: {value of param: point key}}."""
    arms: dict[tuple, dict[str, tuple]] = {}
    for key, params in sweep.points.items():
        arm = tuple((k, canonical_value(v)) for k, v in sorted(params.items()) if k != param)
        arms.setdefault(arm, {})[canonical_value(params.get(param, ""))] = key
    return arms


def choices(sweep: Sweep, tune: Tune) -> list[Choice]:
    """Every arm's choice, in the order of the sweep's points."""
    if not any(tune.param in params for params in sweep.points.values()):
        raise ValueError(
            f"lab.tune.param {tune.param} is not a parameter of the sweep's jobs; sweep it in hydra.sweeper.params"
        )
    samples = sweep.samples([tune.metric])
    found = []
    for arm, keys in arms_of(sweep, tune.param).items():
        values = {rate: dict(samples.get(key, {}).get(tune.metric, {})) for rate, key in keys.items()}
        label = ", ".join(f"{short(k)}={v}" for k, v in arm if k in sweep.swept) or "all"
        found.append(choose(values, tune, label, keys))
    return found


def collapse(sweep: Sweep, found: list[Choice]) -> Sweep:
    """The sweep the checks see: each arm's chosen point only. The unfinished jobs stay: a seed missing at any rate
    could have changed the choice, so the checks on that arm stay undecided."""
    kept = [c.chosen.key for c in found if c.chosen is not None]
    points = {k: sweep.points[k] for k in sweep.points if k in kept}
    members = {k: sweep.members[k] for k in points}
    jobs = [j for k in points for j in members[k]]
    return replace(sweep, jobs=jobs, points=points, members=members)


def _score(candidate: Candidate) -> str:
    if candidate.score is None:
        return "no value"
    return f"{candidate.score:.4g}" if math.isfinite(candidate.score) else "diverged"


def choice_text(choice: Choice, tune: Tune) -> str:
    name = short(tune.param)
    shown = ", ".join(
        f"**{c.value}: {_score(c)}**" if c is choice.chosen else f"{c.value}: {_score(c)}" for c in choice.candidates
    )
    if choice.chosen is None:
        return f"- {choice.arm}: {name} {shown}; no rate has a value of {tune.metric}, nothing chosen"
    plural = "s" if len(choice.compared_on) > 1 else ""
    over = f"seed{plural} {', '.join(choice.compared_on)}" if choice.compared_on else "each rate's own seeds"
    flags = []
    if len(choice.candidates) < 2:
        flags.append("one value only: not tuned")
    if choice.tie:
        flags.append(f"a tie, broken toward the lower {name}")
    if choice.edge:
        flags.append(f"**{EDGE}**")
    flagged = "; " + "; ".join(flags) if flags else ""
    return f"- {choice.arm}: {name} {shown} (means over {over}); chosen {name}={choice.chosen.value}{flagged}"


def tune_lines(found: list[Choice], tune: Tune, checked_metrics: list[str]) -> list[str]:
    best = "lowest" if tune.mode == "min" else "highest"
    same = tune.metric in checked_metrics
    bias = (
        f"The rate is chosen on {tune.metric}, a metric the checks compare too: the chosen rate's value is the best "
        "of several noisy means, a little optimistic."
        if same
        else f"The rate is chosen on {tune.metric}, not on the metrics the checks compare: the data noise of the "
        "choice is independent of theirs (the noise of the trained models is shared), so the chosen arm's checked "
        "value is less flattered by its own selection."
    )
    lines = [
        f"**Tuned per arm** (lab.tune): {short(tune.param)} is chosen for each arm as the value with the {best} mean "
        f"{tune.metric} over the seeds every value of the arm ran (a diverged run counts as the worst; a tie goes to "
        f"the lower value); the checks compare each arm at its chosen value, best against best. {bias}",
        "",
    ]
    return [*lines, *(choice_text(c, tune) for c in found), ""]
