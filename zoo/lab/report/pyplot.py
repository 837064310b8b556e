"""matplotlib's pyplot on the headless Agg backend, imported only when a plot is drawn: for the sweep's plots
(plots.py) and the paper overlays (paper_overlay.py)."""

from __future__ import annotations


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
