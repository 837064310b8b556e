"""PNG plots of a lab sweep (matplotlib, headless): a metric against a swept parameter, one line per value of
another (mean over seeds, error bars = seed spread); or a curve each job recorded (e.g. loss per position).
The axes are labelled with the metrics in words (zoo/lab/metric_names.py), and a plot of the metric of the question's
reference (zoo/lab/reference.py) draws its lines across: the n-gram losses, or chance; the one an arm must beat
dashed."""

from __future__ import annotations

import re
from pathlib import Path

from .metric_names import describe
from .sweep import Sweep, short


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


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
    """The references of the plotted metric as horizontal lines, each labelled at its left end; one line per
    distinct value (points that differ in their data may have their own)."""
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
            ax.text(
                0.01,
                value,
                f"{label} {value:.3g}",
                transform=ax.get_yaxis_transform(),
                fontsize=7,
                color="dimgrey",
                va="bottom",
                ha="left",
            )


def plot_points(sweep: Sweep, spec: dict, path: Path, references=()) -> Path:
    """spec: {y: metric (or a list: one line each), x: parameter, series: parameter (optional), logx, logy, title}."""
    plt = _pyplot()
    x_param, series_param = spec["x"], spec.get("series")
    metrics = spec["y"] if isinstance(spec["y"], list) else [spec["y"]]
    groups: dict[str, list[tuple]] = {}
    for key, params in sweep.points.items():
        groups.setdefault(params.get(series_param, "") if series_param else "", []).append(key)
    x_values = list(dict.fromkeys(p.get(x_param, "") for p in sweep.points.values()))
    numeric = _as_number(x_values)
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for (name, keys), metric in ((g, m) for g in groups.items() for m in metrics):
        xs, ys, errs = [], [], []
        for key in keys:
            stat = sweep.stat(key, metric)
            if stat is None:
                continue
            value = sweep.points[key].get(x_param, "")
            xs.append(float(value) if numeric else x_values.index(value))
            ys.append(stat.mean)
            errs.append(stat.sd)
        if xs:
            order = sorted(range(len(xs)), key=xs.__getitem__)
            ax.errorbar(
                [xs[i] for i in order],
                [ys[i] for i in order],
                yerr=[errs[i] for i in order],
                marker="o",
                capsize=3,
                label=_legend(series_param, name, describe(metric, sweep.lab), len(metrics) > 1),
            )
    if not numeric:
        ax.set_xticks(range(len(x_values)), x_values, rotation=20)
    elif spec.get("logx"):
        ax.set_xscale("log", base=2)
    if spec.get("logy"):
        ax.set_yscale("log")
    reference_lines(ax, references, metrics)
    ax.set_xlabel(short(x_param))
    words = describe(metrics[0], sweep.lab)
    ax.set_ylabel(spec.get("y_label", words if words == metrics[0] else f"{words}\n({metrics[0]})"), fontsize=8)
    ax.set_title(spec.get("title", f"{words} vs {short(x_param)}"), fontsize=10)
    if series_param or len(metrics) > 1:
        ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_curves(sweep: Sweep, spec: dict, path: Path) -> Path:
    """spec: {curve: series name (or several: curves), x_label, y_label, logy, title, smooth}: one line per point
    and curve, the element-wise mean over its seeds."""
    plt = _pyplot()
    names = spec.get("curves") or [spec["curve"]]
    smooth = int(spec.get("smooth", 1))
    fig, ax = plt.subplots(figsize=(6.5, 4.0))
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
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_plots(sweep: Sweep, references: dict | None = None) -> list[Path]:
    """Every plot of the question's `lab.plots`; `references`: point -> its Reference (zoo/lab/reference.py)."""
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
    return written
