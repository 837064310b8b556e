"""The cited paper's own numbers beside the lab's (`lab.paper_overlay`): where the paper gives a table or figure that
the lab's reduced scale reproduces in shape, one extra plot draws the lab's mean (with its 95% t-interval) and the
paper's points, both normalised the same stated way, so that shapes compare although scales do not (a char LM's
nats are not a translation model's perplexity, MNIST's error is not ImageNet's).

    paper_overlay:                     # one overlay, or a list of them
      source: "He et al. 2016, Table 2 (ImageNet top-1 error, 10-crop)"
      x: model.net.depth               # the swept parameter on the x axis (numeric)
      series: model.net.shortcut       # optional: one line per value; the paper's points name the same values
      metric: lab/val_error            # the lab's metric
      normalise: ratio                 # ratio (each series divided by its reference value) or difference (minus it)
      reference: first                 # first (each series' smallest x, the lab's and the paper's apart) or an x
      paper_scale: log                 # optional: the paper's values are taken as their log first (perplexity ->
                                       # nats per token, the unit of a loss)
      logx: true                       # optional
      points: [{x: 18, series: false, value: 27.94}, ...]   # the published figures, as printed

The lab's values are normalised seed by seed (each seed divided by, or minus, the same seed's value at the reference
point: the seeds share their data order, so the pairing removes their common part), then the interval is taken
over the seeds. The numbers must be the paper's published ones; say in `source` where they are, and "read from the
figure, approximate" for values read off a plot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from .claims import canonical_value
from .evidence import ArmSummary, arm_summary
from .metric_names import describe
from .sweep import Sweep, short

OVERLAY_PLOT = "lab_paper_overlay{}.png"  # the index of the overlay (empty for the first): stable names to link
NORMALISE = ("ratio", "difference")
SCALES = ("linear", "log")
KEYS = {"source", "x", "series", "metric", "normalise", "reference", "paper_scale", "logx", "points"}


@dataclass(frozen=True)
class Overlay:
    source: str
    x: str
    series: str | None
    metric: str
    normalise: str
    reference: str | float  # "first" or an x value
    paper_scale: str
    logx: bool
    points: list[tuple[str, float, float]]  # (series value, canonical; x; the published value)


def _number(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where} must be a finite number, got {value!r}")
    return float(value)


def _one(section, where: str) -> Overlay:
    if not isinstance(section, dict):
        raise ValueError(f"{where} must be a mapping (source, x, metric, normalise, points), got {section!r}")
    unknown = sorted(set(section) - KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(KEYS))}")
    for key in ("source", "x", "metric"):
        if not isinstance(section.get(key), str) or not section[key].strip():
            raise ValueError(f"{where}.{key} must be a non-empty string (e.g. the paper's table and its data set)")
    if section.get("normalise") not in NORMALISE:
        raise ValueError(f"{where}.normalise must be one of {', '.join(NORMALISE)}, got {section.get('normalise')!r}")
    scale = section.get("paper_scale", "linear")
    if scale not in SCALES:
        raise ValueError(f"{where}.paper_scale must be one of {', '.join(SCALES)}, got {scale!r}")
    reference = section.get("reference", "first")
    if reference != "first":
        reference = _number(reference, f"{where}.reference (first, or an x value)")
    series = section.get("series")
    points = section.get("points")
    if not isinstance(points, list) or len(points) < 2:
        raise ValueError(f"{where}.points must list at least 2 of the paper's points ({{x, value}}), got {points!r}")
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
        parsed.append((canonical_value(p.get("series", "")) if series else "", _number(p["x"], f"{at}.x"), value))
    overlay = Overlay(
        section["source"],
        section["x"],
        series,
        section["metric"],
        section["normalise"],
        reference,
        scale,
        bool(section.get("logx", False)),
        parsed,
    )
    for name, found in _paper_series(overlay).items():  # each line must have its reference point
        if reference != "first" and reference not in dict(found):
            raise ValueError(f"{where}.reference {reference:g} is not an x of the paper's series {name or 'points'}")
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


def lab_series(sweep: Sweep, overlay: Overlay) -> dict[str, dict[float, ArmSummary]]:
    """series value -> {x: the lab's seeds normalised against the same seed at the reference x, with their mean
    and 95% t-interval}; a series without its reference point, or with a non-numeric x, is left out."""
    samples = sweep.samples([overlay.metric])
    grouped: dict[str, dict[float, dict[str, float]]] = {}
    for key, params in sweep.points.items():
        seeds = samples.get(key, {}).get(overlay.metric)
        try:
            x = float(params.get(overlay.x, ""))
        except ValueError:
            continue
        if seeds:
            name = canonical_value(params.get(overlay.series, "")) if overlay.series else ""
            if x in grouped.get(name, {}):  # another swept parameter: which point stands for (series, x) is unknown
                raise ValueError(
                    f"lab.paper_overlay ({overlay.source}): two points of the sweep at {overlay.x}={x:g}"
                    + (f", {overlay.series}={name}" if overlay.series else "")
                    + "; the overlay needs one point per (series, x): name the other swept parameter as its series"
                )
            grouped.setdefault(name, {})[x] = seeds
    out = {}
    for name, by_x in grouped.items():
        at = min(by_x) if overlay.reference == "first" else overlay.reference
        if at not in by_x:
            continue
        base = by_x[at]
        per_x = {}
        for x, seeds in sorted(by_x.items()):
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
    at = "its smallest x" if overlay.reference == "first" else f"{short(overlay.x)}={overlay.reference:g}"
    word = "divided by" if overlay.normalise == "ratio" else "minus"
    return f"each series {word} its value at {at}"


def plot_overlay(sweep: Sweep, overlay: Overlay, path: Path) -> Path:
    """The lab's normalised means with their 95% t-intervals (circles, solid) and the paper's normalised points
    (hollow squares, dashed) in the colour of the same series."""
    from .plots import _pyplot

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 4.3))
    lab, paper = lab_series(sweep, overlay), paper_series(overlay)
    colours = {}
    for name in dict.fromkeys([*lab, *paper]):
        tag = f"{short(overlay.series)}={name}" if overlay.series else ""
        if name in lab and lab[name]:
            xs = list(lab[name])
            arms = [lab[name][x] for x in xs]
            lows = [a.mean - a.interval[0] if a.interval else 0.0 for a in arms]
            highs = [a.interval[1] - a.mean if a.interval else 0.0 for a in arms]
            label = ", ".join(p for p in ("lab", tag) if p)
            drawn = ax.errorbar(xs, [a.mean for a in arms], yerr=[lows, highs], marker="o", capsize=3, label=label)
            colours[name] = drawn.lines[0].get_color()
        if name in paper:
            xs = sorted(paper[name])
            label = ", ".join(p for p in ("paper", tag) if p)
            ax.plot(
                xs,
                [paper[name][x] for x in xs],
                linestyle="--",
                marker="s",
                markersize=8,
                markerfacecolor="none",
                color=colours.get(name),
                label=label,
            )
    if overlay.logx:
        ax.set_xscale("log", base=2)
    scale = " (log of the paper's values)" if overlay.paper_scale == "log" else ""
    ax.set_xlabel(f"{short(overlay.x)}\n(lab: mean of the seeds' normalised values, bars: 95% t-interval)", fontsize=8)
    ax.set_ylabel(f"{describe(overlay.metric, sweep.lab)}, normalised\n({_how(overlay)}){scale}", fontsize=8)
    ax.set_title(f"the lab beside the paper: {overlay.source}", fontsize=9, wrap=True)
    ax.axhline(1.0 if overlay.normalise == "ratio" else 0.0, color="black", linewidth=0.6)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_overlays(sweep: Sweep) -> list[Path]:
    """One plot per overlay of the question (none without `lab.paper_overlay`)."""
    overlays = overlay_config(sweep.lab)
    return [
        plot_overlay(sweep, o, sweep.directory / OVERLAY_PLOT.format("" if i == 0 else f"_{i + 1}"))
        for i, o in enumerate(overlays)
    ]
