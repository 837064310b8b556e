"""PNG plots of a lab sweep (matplotlib, headless), axes in words (metric_names.py), drawing the numbers of
zoo/lab/decide/evidence.py: a metric against a swept parameter (each mean with its 95% t-interval and every seed as a
dot; the reference lines across, the bar dashed), a curve each job recorded, the tuning plot, and one figure of the
paired claim checks' per-seed differences (PAIRED_PLOT) with the band each check tests."""

from __future__ import annotations

import math
import re
import textwrap
from pathlib import Path

from ..decide.evidence import PairedDifference, arm_summary, paired_differences
from ..decide.metric_names import describe
from ..decide.sweep import Sweep, short
from .paper_overlay import write_overlays
from .pyplot import _pyplot, errorbar, save

PAIRED_PLOT = "lab_paired_differences.png"  # a stable name: the report and docs/lab.md link it
TUNING_PLOT = "lab_tuning.png"  # the tuned metric against the tuned parameter, per arm (zoo/lab/decide/tuning.py)
BARS = "bars: 95% t-interval of the mean over seeds; dots: single seeds"
SMALL = {"fontsize": 7, "color": "dimgrey", "va": "bottom", "ha": "left"}  # a reference line's label
JITTER = 0.06  # how far the seed dots spread, as a fraction of the gap between neighbouring x values


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_")[:60]


def _as_number(values: list[str]) -> list[float] | None:
    try:
        return [float(v) for v in values]
    except ValueError:
        return None


def _legend(series_param, value, metric, several_metrics: bool) -> str | None:
    parts = ([f"{short(series_param)}={value}"] if series_param else []) + ([metric] if several_metrics else [])
    return ", ".join(parts) or None


def reference_lines(ax, references, metrics: list[str]) -> None:
    """The references of the plotted metric as horizontal lines, each labelled at its left end, once per value."""
    drawn = set()
    for ref in references:
        if ref.metric not in metrics:
            continue
        for label, value in ref.lines:
            if (label, value) in drawn:
                continue
            drawn.add((label, value))
            bar = (label, value) == ref.bar
            ax.axhline(value, color="dimgrey", linestyle="--" if bar else ":", linewidth=1.1 if bar else 0.8)
            ax.text(0.01, value, f"{label} {value:.3g}", transform=ax.get_yaxis_transform(), **SMALL)


def _jitter(x: float, i: int, n: int, positions: list[float], logx: bool) -> float:
    """Seed i of n, spread evenly (the same sweep draws the same plot) to the right of the mean at x."""
    offset = JITTER * (1 + i / max(1, n - 1))
    if logx:  # a log axis: the same visual gap at every x
        ratios = [b / a for a, b in zip(positions, positions[1:]) if a > 0 and b > a]
        return x * min(ratios or [2.0]) ** offset
    gaps = [b - a for a, b in zip(positions, positions[1:]) if b > a]
    return x + offset * min(gaps or [1.0])


def _arm_line(ax, xs: list[float], arms, label, positions: list[float], logx: bool) -> None:
    """The means joined by a line with their 95% t-intervals, and each seed's value as a dot in the same colour."""
    sorted_positions = sorted(set(positions))
    line = errorbar(ax, xs, arms, label=label)
    colour = line.lines[0].get_color()
    for x, arm in zip(xs, arms):
        n = len(arm.values)
        seeds_x = [_jitter(x, i, n, sorted_positions, bool(logx)) for i in range(n)]
        ax.scatter(seeds_x, arm.values, s=9, color=colour, alpha=0.55, linewidths=0, zorder=3)


def plot_points(sweep: Sweep, spec: dict, path: Path, references=()) -> Path:
    """spec: {y: metric (or a list: one line each), x: parameter, series: parameter (optional), logx, logy, title}."""
    x_param, series_param = spec["x"], spec.get("series")
    metrics = spec["y"] if isinstance(spec["y"], list) else [spec["y"]]
    groups: dict[str, list[tuple]] = {}
    for key, params in sweep.points.items():
        groups.setdefault(params.get(series_param, "") if series_param else "", []).append(key)
    x_values = list(dict.fromkeys(p.get(x_param, "") for p in sweep.points.values()))
    numeric = _as_number(x_values)
    fig, ax = _pyplot().subplots(figsize=(5.5, 4.0))
    positions = [float(v) for v in x_values] if numeric else list(range(len(x_values)))
    for (name, keys), metric in ((g, m) for g in groups.items() for m in metrics):
        xs, arms = [], []
        for key in keys:
            values = [j.metrics[metric] for j in sweep.members[key] if metric in j.metrics]
            if not values:
                continue
            value = sweep.points[key].get(x_param, "")
            xs.append(float(value) if numeric else x_values.index(value))
            arms.append(arm_summary(values))
        if xs:
            order = sorted(range(len(xs)), key=xs.__getitem__)
            label = _legend(series_param, name, describe(metric, sweep.lab), len(metrics) > 1)
            _arm_line(ax, [xs[i] for i in order], [arms[i] for i in order], label, positions, spec.get("logx"))
    if not numeric:
        ax.set_xticks(range(len(x_values)), x_values, rotation=20)
    elif spec.get("logx"):
        ax.set_xscale("log", base=2)
    if spec.get("logy"):
        ax.set_yscale("log")
    reference_lines(ax, references, metrics)
    ax.set_xlabel(f"{short(x_param)}\n({BARS})", fontsize=8)
    words = describe(metrics[0], sweep.lab)
    ax.set_ylabel(spec.get("y_label", words if words == metrics[0] else f"{words}\n({metrics[0]})"), fontsize=8)
    ax.set_title(spec.get("title", f"{words} vs {short(x_param)}"), fontsize=10)
    if series_param or len(metrics) > 1:
        ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return save(fig, path)


def plot_curves(sweep: Sweep, spec: dict, path: Path) -> Path:
    """spec: {curve: series name (or several: curves), x_label, y_label, logy, title, smooth, vlines}: one line per
    point and curve, the element-wise mean over its seeds."""
    names = spec.get("curves") or [spec["curve"]]
    smooth = int(spec.get("smooth", 1))
    fig, ax = _pyplot().subplots(figsize=(6.5, 4.0))
    for key in sweep.points:
        for name in names:
            rows = [j.series[name] for j in sweep.members[key] if name in j.series]
            if not rows:
                continue
            length = min(len(r) for r in rows)
            mean = [sum(r[i] for r in rows) / len(rows) for i in range(length)]
            if smooth > 1:  # a running mean keeps per-position noise from hiding the trend
                mean = [
                    sum(mean[max(0, i - smooth + 1) : i + 1]) / (i + 1 - max(0, i - smooth + 1)) for i in range(length)
                ]
            label = sweep.label(key) + (f" [{name}]" if len(names) > 1 else "")
            ax.plot(range(1, length + 1), mean, label=label, linewidth=1.2)
    for x in spec.get("vlines", []):
        ax.axvline(x, color="grey", linestyle=":", linewidth=1)
    if spec.get("logy"):
        ax.set_yscale("log")
    ax.set_xlabel(spec.get("x_label", "position"))
    ax.set_ylabel(spec.get("y_label", names[0]))
    ax.set_title(spec.get("title", ", ".join(names)), fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return save(fig, path)


def _difference_panel(ax, diff: PairedDifference) -> None:
    """One check: the seeds' differences as dots at x=0, their mean and 95% paired interval at x=1, zero, the band
    (a line for a difference in differences: the claim is one-sided)."""
    if diff.band and diff.c:
        ax.axhline(diff.band, color="tab:orange", linestyle="--", linewidth=1.2, label=diff.band_label)
    elif diff.band:
        ax.axhspan(-diff.band, diff.band, color="tab:orange", alpha=0.15, label=diff.band_label)
    ax.axhline(0.0, color="black", linewidth=0.8)
    n = len(diff.differences)
    xs = [-0.15 + 0.3 * i / max(1, n - 1) for i in range(n)]  # evenly spread: the same sweep draws the same plot
    shown = "(a - b) - (c - d)" if diff.c else "a - b"
    ax.scatter(xs, diff.differences, s=16, color="tab:blue", alpha=0.7, label=f"{shown}, one seed each")
    if diff.interval is not None:
        low, high = diff.interval
        ax.errorbar(
            [1.0],
            [diff.mean],
            yerr=[[diff.mean - low], [high - diff.mean]],
            fmt="o",
            color="black",
            capsize=4,
            label="mean, 95% paired t-interval",
        )
    if diff.note:
        ax.text(0.5, 0.02, diff.note, transform=ax.transAxes, ha="center", va="bottom", fontsize=7, color="firebrick")
    ax.set_xlim(-0.6, 1.6)
    ax.set_xticks([0, 1], ["seeds", "mean"])
    others = f"\nc: {diff.c}\nd: {diff.d}" if diff.c else ""
    ax.set_title(f"{textwrap.fill(diff.check, 38)}\na: {diff.a}\nb: {diff.b}{others}", fontsize=7)
    ax.set_ylabel(textwrap.fill(diff.unit, 40), fontsize=7)
    ax.set_xlabel(diff.claimed, fontsize=7)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=6, loc="best")
    ax.grid(alpha=0.3, axis="y")


def plot_paired_differences(diffs: list[PairedDifference], path: Path) -> Path:
    """PAIRED_PLOT: one panel per paired claim check, at most three to a row."""
    columns = min(3, len(diffs))
    rows = math.ceil(len(diffs) / columns)
    tall = 0.4 if any(d.c for d in diffs) else 0.0  # two more point labels in a difference in differences' title
    fig, axes = _pyplot().subplots(rows, columns, figsize=(3.6 * columns, (3.9 + tall) * rows), squeeze=False)
    for ax, diff in zip(axes.flat, diffs):
        _difference_panel(ax, diff)
    for ax in list(axes.flat)[len(diffs) :]:
        ax.set_visible(False)
    fig.suptitle("paired differences by seed (a - b, or (a - b) - (c - d))", fontsize=9)
    return save(fig, path)


def _tuning_panel(ax, sweep: Sweep, tune, found, metric: str, references) -> None:
    """One metric against the tuned parameter: a line per arm through the means of the values where no seed
    diverged, every finite seed as a dot, each diverged seed as an x at the top, the chosen value ringed."""
    rates = sorted({float(c.value) for choice in found for c in choice.candidates})
    diverged_label = "a seed that diverged (non-finite)"
    for choice in found:
        whole, partial, diverged = [], [], []  # (x, summary / finite values), and the x of each diverged seed
        for c in choice.candidates:
            values = [j.metrics[metric] for j in sweep.members[c.key] if metric in j.metrics]
            finite = [v for v in values if math.isfinite(v)]
            x = float(c.value)
            if finite and len(finite) == len(values):
                whole.append((x, arm_summary(finite), c is choice.chosen))
            elif finite:  # some seeds diverged: no mean, but the seeds that did not are shown
                partial.append((x, finite))
            diverged += [x] * (len(values) - len(finite))
        colour = None
        if whole:
            before = len(ax.lines)
            _arm_line(ax, [w[0] for w in whole], [w[1] for w in whole], choice.arm, rates, True)
            colour = ax.lines[before].get_color()
            for x, arm, chosen in whole:
                if chosen:
                    ax.scatter([x], [arm.mean], s=160, facecolors="none", edgecolors=colour, linewidths=1.8, zorder=5)
        for x, finite in partial:
            xs = [_jitter(x, i, len(finite), rates, True) for i in range(len(finite))]
            ax.scatter(xs, finite, s=9, color=colour, alpha=0.55, linewidths=0, zorder=3)
        for x in sorted(set(diverged)):  # spread like the seed dots, so that two diverged seeds show as two
            n = diverged.count(x)
            spread = [_jitter(x, i, n, rates, True) for i in range(n)]
            ax.scatter(spread, [0.97] * n, marker="x", color=colour or "firebrick", transform=ax.get_xaxis_transform())
        if diverged:
            ax.scatter([], [], marker="x", color="grey", label=diverged_label)
            diverged_label = "_nolegend_"
    ax.set_xscale("log")
    reference_lines(ax, references, [metric])
    words = describe(metric, sweep.lab)
    ax.set_ylabel(words if words == metric else f"{words}\n({metric})", fontsize=8)
    ax.set_xlabel(f"{short(tune.param)} (log scale)\n({BARS}; ringed: the chosen value)", fontsize=8)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, which="both")


def plot_tuning(sweep: Sweep, tune, found, path: Path, references=()) -> Path:
    """TUNING_PLOT: the tuned metric (and `show`'s, a panel each) against the tuned parameter, per arm."""
    metrics = [tune.metric, *(m for m in tune.show if m != tune.metric)]
    fig, axes = _pyplot().subplots(1, len(metrics), figsize=(5.5 * len(metrics), 4.2), squeeze=False)
    for ax, metric in zip(axes.flat, metrics):
        _tuning_panel(ax, sweep, tune, found, metric, references)
        ax.set_title(f"{describe(metric, sweep.lab)} vs {short(tune.param)}, per arm", fontsize=10)
    return save(fig, path)


def write_plots(sweep: Sweep, references: dict | None = None, checked: Sweep | None = None, tuned=None) -> list[Path]:
    """The question's `lab.plots`, its paper overlays, TUNING_PLOT for a tuned question (`tuned`: its Tune and the
    arms' Choices), and PAIRED_PLOT when a claim check has paired seeds. `references`: point -> its Reference;
    `checked`: the sweep the checks see (the tuned one)."""
    distinct = list({id(r): r for r in (references or {}).values()}.values())
    written = []
    for i, spec in enumerate(sweep.lab.get("plots", [])):
        y = spec.get("y")
        title = spec.get("curve") or (y[0] if isinstance(y, list) else y) or (spec.get("curves") or ["plot"])[0]
        path = sweep.directory / f"lab_{i + 1}_{_slug(title)}.png"
        written.append(
            plot_curves(sweep, spec, path)
            if "curve" in spec or "curves" in spec
            else plot_points(sweep, spec, path, distinct)
        )
    written += write_overlays(sweep)
    if tuned is not None and _as_number([c.value for choice in tuned[1] for c in choice.candidates]):
        written.append(plot_tuning(sweep, *tuned, sweep.directory / TUNING_PLOT, distinct))
    diffs = paired_differences(checked or sweep, sweep)
    if diffs:
        written.append(plot_paired_differences(diffs, sweep.directory / PAIRED_PLOT))
    return written
