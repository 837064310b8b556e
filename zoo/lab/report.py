"""report.md of a lab sweep: the claim, the measured table (mean ± spread over seeds per point), the plots and
the verdict derived from the claim's checks; written into the sweep directory.

    python -m zoo.lab report <sweep_dir>     (and by itself at the end of a lab multirun: LabReport)
"""

from __future__ import annotations

import logging
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from .claims import CheckResult, evaluate, verdict
from .plots import write_plots
from .sweep import Sweep, load_sweep, short

log = logging.getLogger(__name__)


def check_metrics(lab: dict) -> list[str]:
    named = [m for c in lab.get("checks", []) for m in (c.get("metric"), c.get("metric_b")) if m]
    return list(dict.fromkeys([*lab.get("table", []), *named]))


def table(sweep: Sweep, metrics: list[str]) -> list[str]:
    stats = sweep.stats(metrics)
    head = [short(k) for k in sweep.swept] + ["seeds"] + metrics
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, params in sweep.points.items():
        cells = [params.get(k, "") for k in sweep.swept] + [str(len(sweep.members[key]))]
        cells += [str(stats[key][m]) if m in stats[key] else "n/a" for m in metrics]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _wall_line(sweep: Sweep) -> str:
    times = [j.wall_s for j in sweep.jobs if j.wall_s is not None]
    if not times:
        return ""
    return f"{len(sweep.jobs)} jobs, {sum(times):.0f} s of job time in all (longest job {max(times):.0f} s)."


def build_report(sweep: Sweep) -> tuple[str, str, list[Path]]:
    lab = sweep.lab
    metrics = check_metrics(lab)
    stats = sweep.stats(metrics)
    results: list[CheckResult] = [evaluate(c, stats, sweep.points, i) for i, c in enumerate(lab.get("checks", []))]
    outcome = verdict(results)
    plots = write_plots(sweep)
    lines = [f"## {lab.get('title', lab.get('name', sweep.directory.name))}", ""]
    if lab.get("mode") == "quick":
        lines += [
            "> Quick run (a budget of seconds, for tests and a first look): the numbers below say nothing",
            "> about the claim yet; run the full budget for that.",
            "",
        ]
    lines += [f"**Claim**: {lab.get('claim', '(none stated)')}", ""]
    if lab.get("source"):
        lines += [f"Source: {lab['source']}", ""]
    lines += [f"Sweep: `{sweep.directory}`. " + _wall_line(sweep), ""]
    lines += ["### Measured (mean ± sample standard deviation over seeds)", "", *table(sweep, metrics), ""]
    for path in plots:
        lines += [f"![{path.stem}]({path.name})", ""]
    held = [r for r in results if r.holds]
    measured = [r for r in results if r.holds is not None]
    lines += [
        f"### Verdict: {outcome}",
        "",
        f"{len(held)} of {len(measured)} measured checks hold"
        + (f" ({len(results) - len(measured)} not measured or undecided)" if len(measured) < len(results) else "")
        + ". A difference counts only beyond the stated multiple of the seed spread.",
        "",
    ]
    for r in results:
        mark = {True: "holds", False: "does not hold", None: "not decided"}[r.holds]
        lines.append(f"- **{r.name}**: {mark}. {r.detail}")
        if len(r.pairs) > 1:
            lines += [f"  - {p}" for p in r.pairs]
    if lab.get("notes"):
        lines += ["", str(lab["notes"]).strip()]
    return "\n".join(lines) + "\n", outcome, plots


def write_report(directory: str | Path) -> tuple[Path, str, list[Path]]:
    sweep = load_sweep(directory)
    text, outcome, plots = build_report(sweep)
    path = sweep.directory / "report.md"
    path.write_text(text)
    return path, outcome, plots


class LabReport(Callback):
    """Hydra callback of every lab config: report.md and the plots once the multirun has ended."""

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        try:
            path, outcome, plots = write_report(Path(config.hydra.sweep.dir))
        except ValueError as err:  # e.g. every job failed: say so in one line, the sweep's own error follows
            log.error(f"lab report not written: {err}")
            return
        log.info(f"lab report: {path} (verdict: {outcome}; {len(plots)} plots)")
