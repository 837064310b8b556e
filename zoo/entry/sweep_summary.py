"""End-of-sweep summary: a table and a plot of the optimized metric against every swept parameter.

Each job of a multirun writes `result.json` (metric name, value, its overrides) into its own directory; this
Hydra callback reads them back when the multirun ends, so it works for every launcher, in-process or not.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

log = logging.getLogger(__name__)


def collect_results(sweep_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(sweep_dir.glob("*/result.json"), key=_job_order)]


def _job_order(path: Path):
    name = path.parent.name
    return (0, int(name)) if name.isdigit() else (1, name)


def swept_values(results: list[dict]) -> dict[str, list[str]]:
    """Parameter -> its value in each job, for the overrides that differ between jobs."""
    per_job = [dict(o.split("=", 1) for o in r["overrides"] if "=" in o) for r in results]
    keys = sorted({k for job in per_job for k in job})
    return {k: [job.get(k, "") for job in per_job] for k in keys if len({job.get(k) for job in per_job}) > 1}


def write_summary(sweep_dir: Path) -> tuple[Path, Path | None] | None:
    results = collect_results(sweep_dir)
    if not results:
        return None
    metric = results[0]["metric"]
    params = swept_values(results)
    lines = ["| job | " + " | ".join(params) + f" | {metric} |", "|---" * (len(params) + 2) + "|"]
    for i, r in enumerate(results):
        cells = [params[k][i] for k in params] + [f"{r['value']:.6g}" if r["value"] is not None else "n/a"]
        lines.append(f"| {r['job']} | " + " | ".join(cells) + " |")
    table = sweep_dir / "summary.md"
    table.write_text("\n".join(lines) + "\n")
    return table, _plot(sweep_dir, results, params, metric)


def _plot(sweep_dir: Path, results, params, metric) -> Path | None:
    if not params:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(params), figsize=(4 * len(params), 3.2), squeeze=False)
    values = [r["value"] for r in results]
    for ax, (name, settings) in zip(axes[0], params.items()):
        try:
            xs = [float(s) for s in settings]
        except ValueError:  # categorical values: one slot each, in order of appearance
            labels = list(dict.fromkeys(settings))
            xs = [labels.index(s) for s in settings]
            ax.set_xticks(range(len(labels)), labels, rotation=30)
        ax.scatter(xs, values)
        ax.set_xlabel(name)
        ax.set_ylabel(metric)
    fig.tight_layout()
    path = sweep_dir / "summary.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


class SweepSummary(Callback):
    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        written = write_summary(Path(config.hydra.sweep.dir))
        if written:
            log.info(f"sweep summary: {written[0]}" + (f", plot {written[1]}" if written[1] else ""))
