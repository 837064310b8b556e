"""The cited paper's own numbers beside the lab's (`lab.paper_overlay`, one overlay or a list): one more plot draws
the lab's mean (with its 95% t-interval) and the paper's points, both normalised the same stated way, so that shapes
compare although scales do not.

    paper_overlay:
      source: "He et al. 2016, Table 2 (ImageNet top-1 error, 10-crop)"   # where the published numbers are
      x: model.net.depth               # the swept parameter on the x axis
      series: model.net.shortcut       # optional: one line per value; the paper's points name the same values
      metric: lab/val_error            # the lab's metric
      normalise: ratio                 # ratio (divided by the series' reference value) or difference (minus it)
      reference: first                 # first (each series' smallest x) or an x
      paper_scale: log                 # optional: the paper's values taken as their log first (perplexity -> nats)
      logx: true                       # optional
      budget: steps750                 # optional: drawn only by the sweep of that budget (lab.budget)
      points: [{x: 18, series: false, value: 27.94}, ...]   # the published figures, as printed

A categorical x (the points' x are words: relu, gelu) draws the categories the paper's points name, in their order,
and needs its reference named. `metric` may map x values to metrics ({1: lab/loss@1x, 2: lab/loss@2x}): x is then
which metric (a length-extrapolation curve), and every point of the sweep gives one value per x. The lab's values are
normalised seed by seed against the same seed at the reference point, then the interval is taken over the seeds.
Values read off a figure say "read from the figure, approximate" in `source`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ..decide.claims import canonical_value
from ..decide.evidence import ArmSummary, arm_summary
from ..decide.metric_names import describe
from ..decide.sweep import Sweep, short

OVERLAY_PLOT = "lab_paper_overlay{}.png"  # the index of the overlay (empty for the first): stable names to link
NORMALISE = ("ratio", "difference")
SCALES = ("linear", "log")
KEYS = {"source", "x", "series", "metric", "normalise", "reference", "paper_scale", "logx", "budget", "points"}


@dataclass(frozen=True)
class Overlay:
    source: str
    x: str
    series: str | None
    metric: str | dict[float, str]  # one metric, or x value -> its metric (x is then not a swept parameter)
    normalise: str
    reference: str | float  # "first" or an x value (a category's name when x is categorical)
    paper_scale: str
    logx: bool
    points: list[tuple[str, float | str, float]]  # (series value, canonical; x; the published value)
    budget: str | None = None  # drawn only by the sweep of this budget (None: by every sweep)

    @property
    def categorical(self) -> bool:
        return any(isinstance(x, str) for _, x, _ in self.points)

    def categories(self) -> list[str]:
        """A categorical x's values in the order the paper's points name them."""
        return list(dict.fromkeys(x for _, x, _ in self.points))


def _number(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where} must be a finite number, got {value!r}")
    return float(value)


def _metrics(metric, where: str) -> dict[float, str]:
    """`metric` as a mapping x -> metric name (YAML may have written the x values as strings)."""
    out = {}
    for x, name in metric.items():
        try:
            at = _number(float(x), where)
        except (TypeError, ValueError):
            raise ValueError(f"{where} maps x values to metrics; {x!r} is not a number") from None
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{where}[{x}] must name a metric, got {name!r}")
        out[at] = name
    if len(out) < 2:
        raise ValueError(f"{where} must map at least 2 x values to their metrics, got {metric!r}")
    return out


def _one(section, where: str) -> Overlay:
    if not isinstance(section, dict):
        raise ValueError(f"{where} must be a mapping (source, x, metric, normalise, points), got {section!r}")
    unknown = sorted(set(section) - KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(KEYS))}")
    for key in ("source", "x") + (() if isinstance(section.get("metric"), dict) else ("metric",)):
        if not isinstance(section.get(key), str) or not section[key].strip():
            raise ValueError(f"{where}.{key} must be a non-empty string (e.g. the paper's table and its data set)")
    metric = section["metric"]
    if isinstance(metric, dict):
        metric = _metrics(metric, f"{where}.metric")
    budget = section.get("budget")
    if budget is not None and (not isinstance(budget, str) or not budget.strip()):
        raise ValueError(f"{where}.budget must name one of the question's budgets (lab.budget[s]), got {budget!r}")
    if section.get("normalise") not in NORMALISE:
        raise ValueError(f"{where}.normalise must be one of {', '.join(NORMALISE)}, got {section.get('normalise')!r}")
    scale = section.get("paper_scale", "linear")
    if scale not in SCALES:
        raise ValueError(f"{where}.paper_scale must be one of {', '.join(SCALES)}, got {scale!r}")
    series = section.get("series")
    points = section.get("points")
    if not isinstance(points, list) or len(points) < 2:
        raise ValueError(f"{where}.points must list at least 2 of the paper's points ({{x, value}}), got {points!r}")
    categorical = any(isinstance(p, dict) and isinstance(p.get("x"), (str, bool)) for p in points)
    reference = section.get("reference", "first")
    if categorical:
        if reference == "first" or isinstance(metric, dict) or section.get("logx"):
            raise ValueError(
                f"{where}: a categorical x (the points' x are words) needs its reference named "
                "(reference: one of the points' x), one metric and no logx"
            )
        reference = canonical_value(reference)
    elif reference != "first":
        reference = _number(reference, f"{where}.reference (first, or an x value)")
    parsed = []
    for i, p in enumerate(points):
        at = f"{where}.points[{i}]"
        if not isinstance(p, dict) or not {"x", "value"} <= set(p):
            raise ValueError(f"{at} must be a mapping with x and value (and series when the overlay has one)")
        if series and "series" not in p:
            raise ValueError(f"{at} needs a series value: the overlay draws one line per {series}")
        value = _number(p["value"], f"{at}.value")
        if scale == "log" and value <= 0:
            raise ValueError(f"{at}.value must be > 0 with paper_scale: log, got {value!r}")
        x = canonical_value(p["x"]) if categorical else _number(p["x"], f"{at}.x")
        parsed.append((canonical_value(p.get("series", "")) if series else "", x, value))
    source, x, logx = section["source"], section["x"], bool(section.get("logx", False))
    overlay = Overlay(source, x, series, metric, section["normalise"], reference, scale, logx, parsed, budget)
    for name, found in _paper_series(overlay).items():  # each line must have its reference point
        if reference != "first" and reference not in dict(found):
            shown = reference if categorical else f"{reference:g}"
            raise ValueError(f"{where}.reference {shown} is not an x of the paper's series {name or 'points'}")
    return overlay


def overlay_config(lab: dict) -> list[Overlay]:
    """The question's overlays (none without `lab.paper_overlay`); a one-line error naming the key otherwise."""
    section = lab.get("paper_overlay")
    if section is None:
        return []
    if isinstance(section, list):
        return [_one(s, f"lab.paper_overlay[{i}]") for i, s in enumerate(section)]
    return [_one(section, "lab.paper_overlay")]


def normalised(values: dict[float, float], how: str, reference: str | float) -> dict[float, float]:
    """{x: value} divided by (ratio) or minus (difference) the value at the reference x ('first': the smallest)."""
    at = min(values) if reference == "first" else reference
    base = values[at]
    if how == "ratio":
        return {x: v / base for x, v in values.items()}
    return {x: v - base for x, v in values.items()}


def _paper_series(overlay: Overlay) -> dict[str, list[tuple[float, float]]]:
    out: dict[str, list[tuple[float, float]]] = {}
    for name, x, value in overlay.points:
        out.setdefault(name, []).append((x, math.log(value) if overlay.paper_scale == "log" else value))
    return out


def paper_series(overlay: Overlay) -> dict[str, dict[float, float]]:
    """series value -> {x: the paper's value, on its scale, normalised}."""
    return {k: normalised(dict(v), overlay.normalise, overlay.reference) for k, v in _paper_series(overlay).items()}


def _lab_seeds(sweep: Sweep, overlay: Overlay) -> dict[str, dict[float | str, dict[str, float]]]:
    """series value -> x -> {seed: the lab's value}: x read from the swept parameter, or from which metric."""
    by_x = overlay.metric if isinstance(overlay.metric, dict) else None
    samples = sweep.samples(list(by_x.values()) if by_x else [overlay.metric])
    categories = overlay.categories() if overlay.categorical else None
    grouped: dict[str, dict[float | str, dict[str, float]]] = {}
    for key, params in sweep.points.items():
        name = canonical_value(params.get(overlay.series, "")) if overlay.series else ""
        if by_x:  # every point of the sweep is one model measured at each x
            found = {x: samples.get(key, {}).get(metric) for x, metric in by_x.items()}
        elif categories is not None:
            x = canonical_value(params.get(overlay.x, ""))
            found = {x: samples.get(key, {}).get(overlay.metric)} if x in categories else {}
        else:
            try:
                x = float(params.get(overlay.x, ""))
            except ValueError:
                continue
            found = {x: samples.get(key, {}).get(overlay.metric)}
        for x, seeds in found.items():
            if not seeds:
                continue
            if x in grouped.get(name, {}):  # another swept parameter: which point stands for (series, x) is unknown
                shown = x if isinstance(x, str) else f"{x:g}"
                raise ValueError(
                    f"lab.paper_overlay ({overlay.source}): two points of the sweep at {overlay.x}={shown}"
                    + (f", {overlay.series}={name}" if overlay.series else "")
                    + "; the overlay needs one point per (series, x): name the other swept parameter as its series"
                )
            grouped.setdefault(name, {})[x] = seeds
    return grouped


def _ordered(xs, overlay: Overlay) -> list:
    """x values in drawing order: a categorical x in the paper's order, numbers ascending."""
    return [c for c in overlay.categories() if c in xs] if overlay.categorical else sorted(xs)


def lab_series(sweep: Sweep, overlay: Overlay) -> dict[str, dict[float | str, ArmSummary]]:
    """series value -> {x: the lab's seeds normalised against the same seed at the reference x, with their mean
    and 95% t-interval}; a series without its reference point, or with a non-numeric x, is left out."""
    out = {}
    for name, by_x in _lab_seeds(sweep, overlay).items():
        at = min(by_x) if overlay.reference == "first" else overlay.reference
        if at not in by_x:
            continue
        base = by_x[at]
        per_x = {}
        for x in _ordered(by_x, overlay):
            seeds = by_x[x]
            shared = [s for s in seeds if s in base]
            if overlay.normalise == "ratio":
                values = [seeds[s] / base[s] if base[s] else math.nan for s in shared]
            else:
                values = [seeds[s] - base[s] for s in shared]
            if values:
                per_x[x] = arm_summary(values)
        out[name] = per_x
    return out


def _how(overlay: Overlay) -> str:
    if overlay.reference == "first":
        at = "its smallest x"
    else:
        shown = overlay.reference if overlay.categorical else f"{overlay.reference:g}"
        at = f"{short(overlay.x)}={shown}"
    word = "divided by" if overlay.normalise == "ratio" else "minus"
    return f"each series {word} its value at {at}"


def plot_overlay(sweep: Sweep, overlay: Overlay, path: Path) -> Path:
    """The lab's normalised means with their 95% t-intervals (circles, solid) and the paper's normalised points
    (hollow squares, dashed) in the colour of the same series."""
    from .pyplot import _pyplot, errorbar, save

    fig, ax = _pyplot().subplots(figsize=(6.0, 4.3))
    lab, paper = lab_series(sweep, overlay), paper_series(overlay)
    # a categorical x is drawn at 0, 1, ... in the paper's order, named on the ticks, its points not joined
    where = {c: i for i, c in enumerate(overlay.categories())} if overlay.categorical else None
    place = (lambda xs: [where[x] for x in xs]) if where else (lambda xs: list(xs))
    join = "none" if where else "-"
    colours = {}
    for name in dict.fromkeys([*lab, *paper]):
        tag = f"{short(overlay.series)}={name}" if overlay.series else ""
        if name in lab and lab[name]:
            xs = list(lab[name])
            label = ", ".join(p for p in ("lab", tag) if p)
            drawn = errorbar(ax, place(xs), [lab[name][x] for x in xs], linestyle=join, label=label)
            colours[name] = drawn.lines[0].get_color()
        if name in paper:
            xs = _ordered(paper[name], overlay)
            label = ", ".join(p for p in ("paper", tag) if p)
            ax.plot(
                place(xs),
                [paper[name][x] for x in xs],
                linestyle="none" if where else "--",
                marker="s",
                markersize=8,
                markerfacecolor="none",
                color=colours.get(name),
                label=label,
            )
    if where:
        ax.set_xticks(range(len(where)), list(where))
    if overlay.logx:
        ax.set_xscale("log", base=2)
    scale = "\n(the paper's values taken as their log)" if overlay.paper_scale == "log" else ""
    if isinstance(overlay.metric, dict):  # the x axis says which metric: the x label names them in their x order
        measured, read = (
            "the metric at each x",
            f"lab: {', '.join(overlay.metric[x] for x in sorted(overlay.metric))};\n",
        )
    else:
        measured, read = describe(overlay.metric, sweep.lab), "lab: "
    ax.set_xlabel(f"{short(overlay.x)}\n({read}mean of the seeds' normalised values, bars: 95% t-interval)", fontsize=8)
    ax.set_ylabel(f"{measured}, normalised\n({_how(overlay)}){scale}", fontsize=8)
    ax.set_title(f"the lab beside the paper: {overlay.source}", fontsize=9, wrap=True)
    ax.axhline(1.0 if overlay.normalise == "ratio" else 0.0, color="black", linewidth=0.6)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return save(fig, path)


def write_overlays(sweep: Sweep) -> list[Path]:
    """One plot per overlay of the question (none without `lab.paper_overlay`), but an overlay tied to another
    budget than the sweep's (`budget`) is left to that budget's sweep."""
    overlays = overlay_config(sweep.lab)
    budget = sweep.lab.get("budget")
    return [
        plot_overlay(sweep, o, sweep.directory / OVERLAY_PLOT.format("" if i == 0 else f"_{i + 1}"))
        for i, o in enumerate(overlays)
        if o.budget is None or o.budget == budget
    ]
