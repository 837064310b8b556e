"""matplotlib's pyplot on the headless Agg backend, imported only when a plot is drawn, and what every plot does."""

from __future__ import annotations


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def errorbar(ax, xs, arms, **style):
    """Each arm's mean (an evidence.ArmSummary) with its 95% t-interval as error bars (none without an interval)."""
    lows = [a.mean - a.interval[0] if a.interval else 0.0 for a in arms]
    highs = [a.interval[1] - a.mean if a.interval else 0.0 for a in arms]
    return ax.errorbar(xs, [a.mean for a in arms], yerr=[lows, highs], marker="o", capsize=3, **style)


def save(fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _pyplot().close(fig)
    return path
