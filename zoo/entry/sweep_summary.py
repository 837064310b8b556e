"""End-of-sweep summary: a table and a plot of the optimized metric against every swept parameter, read back from
each job's `result.json` or `failed.json` (zoo.entry.errors) when the multirun ends, whatever the launcher. The
failed jobs are listed, and the multirun then exits 1.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger(__name__)
FAILED = "failed.json"


def write_failure(job_dir, *, job: int, overrides: list[str], error: str) -> None:
    path = Path(job_dir) / FAILED
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"job": job, "status": "failed", "error": error, "overrides": overrides}
    path.write_text(json.dumps(record, indent=2) + "\n")


def collect_results(sweep_dir: Path) -> list[dict]:
    """Every job's record, in job order: result.json, or failed.json (with "dir") when it is newer."""
    records = []
    job_dirs = {p.parent for name in ("result.json", FAILED) for p in sweep_dir.glob(f"*/{name}")}
    for job_dir in sorted(job_dirs, key=_job_order):
        done, failed = job_dir / "result.json", job_dir / FAILED
        if failed.is_file() and (not done.is_file() or failed.stat().st_mtime > done.stat().st_mtime):
            records.append({**json.loads(failed.read_text()), "value": None, "dir": str(job_dir)})
        else:
            records.append(json.loads(done.read_text()))
    return records


def failures(results: list[dict]) -> list[dict]:
    return [r for r in results if r.get("status") == "failed"]


def _job_order(job_dir: Path):
    name = job_dir.name
    return (0, int(name)) if name.isdigit() else (1, name)


def swept_values(results: list[dict], swept: Iterable[str] = ()) -> dict[str, list[str]]:
    """Parameter -> its value in each job, for the overrides that differ between jobs and the parameters the sweep
    was given (`swept`), even with one value."""
    per_job = [dict(o.split("=", 1) for o in r["overrides"] if "=" in o) for r in results]
    keys = sorted({k for job in per_job for k in job})
    swept = set(swept)
    return {
        k: [job.get(k, "") for job in per_job] for k in keys if k in swept or len({job.get(k) for job in per_job}) > 1
    }


def swept_parameters(config: DictConfig) -> list[str]:
    """The parameters a multirun was given: its command-line overrides and the sweeper's `params`."""
    keys = [
        o.split("=", 1)[0] for o in OmegaConf.select(config, "hydra.overrides.task", default=None) or () if "=" in o
    ]
    params = OmegaConf.select(config, "hydra.sweeper.params", default=None)
    return keys + (list(params) if isinstance(params, DictConfig) else [])


def write_summary(sweep_dir: Path, swept: Iterable[str] = ()) -> tuple[Path, Path | None] | None:
    results = collect_results(sweep_dir)
    if not results:
        return None
    metric = next((r["metric"] for r in results if r.get("metric")), "value")
    params = swept_values(results, swept)
    lines = ["| job | " + " | ".join(params) + f" | {metric} |", "|---" * (len(params) + 2) + "|"]
    for i, r in enumerate(results):
        value = "failed" if r.get("status") == "failed" else "n/a" if r["value"] is None else f"{r['value']:.6g}"
        lines.append(f"| {r['job']} | " + " | ".join([params[k][i] for k in params] + [value]) + " |")
    failed = failures(results)
    if failed:
        lines += ["", f"{len(failed)} of {len(results)} jobs failed:"]
        lines += [f"- job {r['job']} ({r['dir']}): {r['error']}" for r in failed]
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
    scored = [i for i, r in enumerate(results) if r["value"] is not None]  # failed jobs have no point
    values = [results[i]["value"] for i in scored]
    for ax, (name, all_settings) in zip(axes[0], params.items()):
        settings = [all_settings[i] for i in scored]
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
        sweep_dir = Path(config.hydra.sweep.dir)
        written = write_summary(sweep_dir, swept_parameters(config))
        if written:
            log.info(f"sweep summary: {written[0]}" + (f", plot {written[1]}" if written[1] else ""))
        failed = failures(collect_results(sweep_dir))
        if failed:
            # Hydra only warns about what a callback raises; a script or scheduler reads the exit status.
            where = ", ".join(r["dir"] for r in failed)
            print(
                f"error: {len(failed)} job(s) of the sweep failed: {where}; see {sweep_dir / 'summary.md'}",
                file=sys.stderr,
                flush=True,
            )
            sys.exit(1)
