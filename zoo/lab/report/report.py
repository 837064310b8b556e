"""report.md of a lab sweep, written into the sweep directory: the claim, the measured table, the plots, each check's
effect with its 95% interval and outcome, and the verdict from the claim checks (zoo/lab/decide/claims.py).
`python -m zoo.lab report <sweep_dir>`, and by itself at the end of a lab multirun (LabReport)."""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import shlex
import stat
from dataclasses import replace
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from ..decide import reference, stats, tuning
from ..decide.claims import OUTCOMES, CheckResult, decide, evaluate, matches, select, verdict
from ..decide.metric_names import header
from ..decide.sweep import Sweep, Unfinished, load_sweep, short
from ..measure import timing
from ..questions.budgets import budget_overrides, run_budget
from .plots import write_plots
from .work import sweep_work, work_line

log = logging.getLogger(__name__)

PER_SEED_CSV = "lab_per_seed.csv"  # one row per job, beside the plots
DECISION_JSON = "decision.json"  # the decision's facts (decision_facts), beside report.md
# The decision rule in one paragraph, under every verdict.
RULE_TEXT = (
    "Each check gives its effect with a 95% confidence interval (paired t over the seeds both points ran, Welch t "
    "otherwise; a `factor` is tested on the log ratio; a `less`/`greater` comparison of dev accuracies by McNemar's "
    "test pooled over the seeds where every seed recorded which dev examples it got right, together with the "
    "seed-level paired t: an outcome needs both). A claim check is supported when the effect clears the "
    "smallest effect of interest (the threshold for `above`/`below`; for `similar`, TOST inside the equivalence "
    f"bound), contradicted when it falls short of it, each at a one-sided p < {stats.ALPHA:g} after Holm's correction "
    "over all the question's claim checks (one no test could decide counting with p = 1); inconclusive otherwise, "
    f"and always with fewer than {stats.MIN_SEEDS} seeds per point. Sanity checks (of the implementation) must hold "
    "on every seed and do not count toward the verdict."
)


def _checked(checks: list[dict]) -> list[str]:
    return [m for c in checks for m in (c.get("metric"), c.get("metric_b")) if m]


def check_metrics(lab: dict) -> list[str]:
    named = _checked(lab.get("checks", []))
    tune = lab.get("tune") if isinstance(lab.get("tune"), dict) else {}
    tuned = [m for m in [tune.get("metric"), *(tune.get("show") or [])] if isinstance(m, str)]
    return list(dict.fromkeys([*lab.get("table", []), *named, *tuned]))


def timed_metrics(sweep: Sweep, metrics: list[str]) -> list[str]:
    """The metrics that are timings: some job recorded their spread beside them."""
    return [m for m in metrics if any(m + timing.SPREAD in j.metrics for j in sweep.jobs)]


def timing_lines(sweep: Sweep, metrics: list[str]) -> list[str]:
    """Each timing per point and seed: its median, its spread, and the flag when the machine was shared."""
    timed = timed_metrics(sweep, metrics)
    if not timed:
        return []
    limits = {j.metrics[m + timing.LIMIT] for m in timed for j in sweep.jobs if m + timing.LIMIT in j.metrics}
    limit = "/".join(f"{100 * v:.0f}%" for v in sorted(limits)) or "the limit"
    seed_key = sweep.lab.get("seed_key", "seed")
    lines = [
        "Timings: the median ± spread (interquartile range / median) of the repeated runs behind each, per point and "
        "seed (arms timed together ran in rounds interleaved in one process, zoo/lab/measure/timing.py); above "
        f"{limit} a timing is **contended**, the machine was shared, and it decides no check:",
        "",
    ]
    for key, jobs in sweep.members.items():
        for m in timed:
            shown = []
            for j in (j for j in jobs if m in j.metrics and m + timing.SPREAD in j.metrics):
                flag = " **contended**" if j.metrics.get(m + timing.CONTENDED) else ""
                seed = j.params.get(seed_key, j.directory.name)
                shown.append(f"{j.metrics[m]:.4g} ± {100 * j.metrics[m + timing.SPREAD]:.0f}%{flag} (seed {seed})")
            if shown:
                lines.append(f"- {sweep.label(key)}, {header(m, sweep.lab)}: " + ", ".join(shown))
    loads = [j.metrics["lab/load_avg"] for j in sweep.jobs if "lab/load_avg" in j.metrics]
    cores = {j.metrics["lab/cores"] for j in sweep.jobs if "lab/cores" in j.metrics}
    if loads:  # shown, not decisive: it lags by a minute and counts the job's own threads
        where = f" on {'/'.join(f'{c:.0f}' for c in sorted(cores))} cores" if cores else ""
        lines += ["", f"Load average (1 min) at the end of the jobs: {min(loads):.2g} to {max(loads):.2g}{where}."]
    return [*lines, ""]


def table(
    sweep: Sweep,
    metrics: list[str],
    found: dict[tuple, reference.Reference] | None = None,
    not_learned: dict[tuple, str] | None = None,
    chosen: set[tuple] | None = None,
) -> list[str]:
    """Mean ± sd per point; with a reference, whether the point beat it; for a tuned question, the chosen points."""
    head = [short(k) for k in sweep.swept] + ["seeds"] + [header(m, sweep.lab) for m in metrics]
    head += ["vs reference"] if found else []
    head += ["tuned per arm"] if chosen is not None else []
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, params in sweep.points.items():
        cells = [params.get(k, "") for k in sweep.swept] + [str(len(sweep.members[key]))]
        cells += [str(stat) if (stat := sweep.stat(key, m)) else "n/a" for m in metrics]
        if found:
            ref = found.get(key)
            stat = sweep.stat(key, ref.metric) if ref else None
            bar = ref.bar_name() if ref else ""
            beats = "n/a" if stat is None else f"beats {bar}" if math.isfinite(stat.mean) else "diverged"
            cells.append((not_learned or {}).get(key) or beats)
        if chosen is not None:
            cells.append("**chosen**" if key in chosen else "")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def references(sweep: Sweep) -> tuple[dict[tuple, reference.Reference], dict[tuple, str], list[str]]:
    """(point -> its reference, point -> 'did not learn (...)' where it does not beat it, the reference's lines)."""
    found, lines = reference.for_sweep(sweep)
    not_learned = {}
    for key, ref in found.items():
        stat = sweep.stat(key, ref.metric)
        text = ref.shortfall(stat.mean) if stat is not None else None
        if text:
            not_learned[key] = text
    return found, not_learned, lines


def write_per_seed_csv(sweep: Sweep, metrics: list[str]) -> Path:
    seed_key = sweep.lab.get("seed_key", "seed")
    path = sweep.directory / PER_SEED_CSV
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["job", *sweep.swept, seed_key, "job_time_s", *metrics])
        for job in sweep.jobs:
            wall = "" if job.wall_s is None else f"{job.wall_s:.1f}"
            values = [repr(job.metrics[m]) if m in job.metrics else "" for m in metrics]
            row = [job.directory.name, *[job.params.get(k, "") for k in sweep.swept], job.params.get(seed_key, "")]
            writer.writerow([*row, wall, *values])
    return path


def wall_line(sweep: Sweep) -> str:
    """The job time and, beside it, what each job trained on (zoo/lab/report/work.py)."""
    times = [j.wall_s for j in sweep.jobs if j.wall_s is not None]
    spent = ""
    if times:
        spent = f"{len(sweep.job_dirs())} jobs, {sum(times):.0f} s of job time in all (longest job {max(times):.0f} s)."
    return " ".join(part for part in (spent, work_line(sweep)) if part)


def shown_overrides(sweep: Sweep) -> list[str]:
    """The command line's overrides, less the experiment, the sweep folder and those `--budget` added."""
    shown = [o for o in sweep.overrides if not o.startswith(("experiment=", "hydra.sweep.dir=", "hydra.sweep.subdir="))]
    for override in budget_overrides(sweep.lab):
        if override in shown:  # once: the same key given again after it (a shorter run) is an override of its own
            shown.remove(override)
    return shown


def run_command(sweep: Sweep, name: str) -> str:
    budget = run_budget(sweep.lab)
    return " ".join(
        [
            "python -m zoo.lab run",
            name,
            *(["--budget", budget] if budget else []),
            *map(shlex.quote, shown_overrides(sweep)),
        ]
    )


def budget_text(sweep: Sweep) -> str:
    budget = sweep.lab.get("budget")
    if budget is None:
        return ""
    changed = ", then changed by the overrides below" if changed_overrides(sweep) else ""
    if run_budget(sweep.lab):
        return f"Budget: `{budget}` (`--budget {budget}`: {' '.join(sweep.lab['budgets'][budget])}){changed}."
    return f"Budget: `{budget}` (the question's own config){changed}."


def work_facts(sweep: Sweep) -> dict | None:
    """{count (the most any job trained on), low (the least), unit}; None when no job's config says."""
    known = [w for w in sweep_work(sweep) if w is not None]
    if not known:
        return None
    return {"count": max(w.count for w in known), "low": min(w.count for w in known), "unit": known[0].unit}


def changed_overrides(sweep: Sweep) -> list[str]:
    """The overrides that change what was measured (budget, seeds, points); Hydra's own (launcher, logging) do not."""
    return [o for o in shown_overrides(sweep) if not o.lstrip("+~").startswith(("hydra.", "hydra/"))]


def _job_text(sweep: Sweep, job: Unfinished) -> str:
    if job.params is None:
        return f"job {job.name}"
    # the parameters that vary over the sweep's jobs (the seed included) tell it apart
    every = [j.params for j in sweep.jobs] + [job.params]
    varying = [k for k, v in job.params.items() if any(p.get(k) != v for p in every)]
    return f"job {job.name} (" + ", ".join(f"{short(k)}={job.params[k]}" for k in varying) + ")"


def _left_undecided(
    result: CheckResult, check: dict, sweep: Sweep, not_learned: dict[tuple, str] | None = None
) -> CheckResult:
    """A check is not decided on a point that lost a seed, nor (a claim check) on a point that did not learn, unless
    it lists that point in `may_not_learn`: then not learning is the claim's prediction."""
    reasons, predicted = [], []
    hit = [u for u in sweep.unfinished if u.params is None or any(matches(u.params, s) for s in check["points"])]
    if hit:
        reasons.append(", ".join(_job_text(sweep, u) for u in hit) + " left no result")
    ref = reference.reference_config(sweep.lab) if not_learned else None
    if ref and result.kind == "claim" and not reference.exempt(check, ref):
        keys = [select(sweep.points, s, f"check '{result.name}'") for s in check["points"]]
        spared = set(check.get("may_not_learn") or [])
        for i, k in enumerate(keys):
            if k in not_learned and k not in keys[:i]:
                (predicted if i in spared else reasons).append(f"{sweep.label(k)} {not_learned[k]}")
    if predicted and not reasons:
        return replace(result, detail=f"{result.detail}; {', '.join(predicted)}, as the claim predicts")
    if not reasons:
        return result
    return replace(
        result,
        outcome="inconclusive",
        detail=f"{'; '.join(reasons)} (measured: {result.detail})",
        p_support=None,
        p_contradict=None,
    )


def check_lines(results: list[CheckResult]) -> list[str]:
    lines = []
    for r in results:
        lines.append(f"- **{r.name}**: {r.outcome}. {r.detail}")
        if len(r.pairs) > 1:
            lines += [f"  - {p}" for p in r.pairs]
    return lines


def decision_facts(
    sweep: Sweep,
    outcome: str,
    claims: list[CheckResult],
    found: dict[tuple, reference.Reference],
    not_learned: dict[tuple, str],
    tuned: tuple | None = None,
) -> dict:
    """The decision as data: docs/lab.md's summary and budget tables are rendered from it (page.py)."""
    seeds = [len(jobs) for jobs in sweep.members.values()]
    times = [j.wall_s for j in sweep.jobs if j.wall_s is not None]
    paper = {c.get("name", f"check {i}") for i, c in enumerate(sweep.lab.get("checks", [])) if c.get("paper")}
    facts = {
        "question": sweep.lab.get("name", sweep.directory.name),
        "outcome": outcome,
        "checks": {o: sum(r.outcome == o for r in claims) for o in OUTCOMES},
        "seeds": [min(seeds), max(seeds)],
        "jobs": len(sweep.job_dirs()),
        "unfinished": len(sweep.unfinished),
        "job_time_s": round(sum(times)) if times else None,
        "did_not_learn": [sweep.label(k) for k in not_learned],
        "reference": "; ".join(dict.fromkeys(r.bar_text() for r in found.values())) or None,
        "points": len(sweep.points),
        "budget": sweep.lab.get("budget"),
        "work": work_facts(sweep),
        "claim_checks": [
            {
                "name": r.name,
                "outcome": r.outcome,
                "effects": [list(e) for e in r.effects],
                "unit": r.unit,
                "paper": r.name in paper,
            }
            for r in claims
        ],
    }
    if tuned is not None:  # the value chosen per arm, and the arms whose choice is at the edge of the grid
        tune, found_choices = tuned
        facts["tuned"] = {
            "param": tune.param,
            "metric": tune.metric,
            "chosen": {c.arm: c.chosen.value if c.chosen else None for c in found_choices},
            "edge": [c.arm for c in found_choices if c.edge],
        }
    return facts


def build_report(sweep: Sweep) -> tuple[str, dict, list[Path]]:
    """(report.md's text, the decision's facts, the plots written into the sweep directory)."""
    lab = sweep.lab
    metrics = check_metrics(lab)
    checks = lab.get("checks", [])
    found, not_learned, reference_lines = references(sweep)
    # a tuned question's checks see each arm at its chosen value only; the table and the plots keep every value
    tune = tuning.tune_config(lab)
    tuned = (tune, tuning.choices(sweep, tune)) if tune else None
    checked = tuning.collapse(sweep, tuned[1]) if tuned else sweep
    # a timing's spread and contention flag go with it: a contended timing decides no check
    measured = metrics + timing.companions(timed_metrics(sweep, metrics))
    results = []
    for i, c in enumerate(checks):
        on = sweep if tuned and c.get("grid") is True else checked  # a check of the sensitivity reads the whole grid
        result = evaluate(c, on.samples(measured), on.points, i, lab, on.per_example(metrics))
        results.append(_left_undecided(result, c, on, not_learned))
    results = decide(results)  # Holm's correction over all the claim checks (an undecidable one at p = 1)
    outcome = verdict(results)
    plots = write_plots(sweep, found, checked, tuned)
    csv_path = write_per_seed_csv(sweep, measured)
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
    lines += [f"Sweep: `{sweep.directory}`. " + wall_line(sweep), ""]
    lines += [budget_text(sweep), ""] if budget_text(sweep) else []
    if shown_overrides(sweep):
        lines += ["Overrides: `" + " ".join(shown_overrides(sweep)) + "`", ""]
    lines += ["### Measured (mean ± sample standard deviation over seeds)", ""]
    lines += [*reference_lines, ""] if reference_lines else []
    chosen = {c.chosen.key for c in tuned[1] if c.chosen is not None} if tuned else None
    lines += [*table(sweep, metrics, found, not_learned, chosen), ""]
    if tuned:
        lines += tuning.tune_lines(tuned[1], tune, _checked(checks))
    lines += timing_lines(sweep, metrics)
    lines += [f"Per-seed results: [{csv_path.name}]({csv_path.name}).", ""]
    if sweep.unfinished:
        total = len(sweep.job_dirs()) + len(sweep.unfinished)
        lines += [
            f"**{len(sweep.unfinished)} of {total} jobs left no result**; the checks on their points are inconclusive:"
        ]
        lines += [f"- {_job_text(sweep, u)}: {u.why}" for u in sweep.unfinished] + [""]
    for path in plots:
        lines += [f"![{path.stem}]({path.name})", ""]
    claims = [r for r in results if r.kind == "claim"]
    sanity = [r for r in results if r.kind == "sanity"]
    counts = ", ".join(f"{sum(r.outcome == o for r in claims)} {o}" for o in OUTCOMES)
    lines += [
        f"### Verdict: {outcome}",
        "",
        f"Claim checks: {counts} (of {len(claims)}). {RULE_TEXT}",
        "",
        *check_lines(claims),
    ]
    if sanity:
        lines += ["", "Sanity checks (the implementation; not counted toward the verdict):", "", *check_lines(sanity)]
    if lab.get("notes"):
        lines += ["", str(lab["notes"]).strip()]
    facts = decision_facts(sweep, outcome, claims, found, not_learned, tuned)
    return "\n".join(lines) + "\n", facts, plots


def writable(path: Path) -> bool:
    """May we write there? Without its write bits a path counts as read-only even for root."""
    return os.access(path, os.W_OK) and bool(path.stat().st_mode & stat.S_IWUSR)


def write_report(directory: str | Path) -> tuple[Path, str, list[Path]]:
    sweep = load_sweep(directory)
    fix = "make it writable, or copy the sweep somewhere writable (cp -r) and report the copy"
    if not writable(sweep.directory):
        raise ValueError(f"{sweep.directory}: the sweep directory is read-only, and the report is written there; {fix}")
    try:
        text, facts, plots = build_report(sweep)
        path = sweep.directory / "report.md"
        path.write_text(text)
        (sweep.directory / DECISION_JSON).write_text(json.dumps(facts, indent=1, ensure_ascii=False) + "\n")
    except OSError as err:
        raise ValueError(f"{err.filename or sweep.directory}: {err.strerror or err}; {fix}") from None
    return path, facts["outcome"], plots


class LabReport(Callback):
    """Hydra callback of every lab config: report.md and the plots once the multirun has ended."""

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        try:
            path, outcome, plots = write_report(Path(config.hydra.sweep.dir))
        except ValueError as err:  # e.g. every job failed: say so in one line, the sweep's own error follows
            log.error(f"lab report not written: {err}")
            return
        log.info(f"lab report: {path} (verdict: {outcome}; {len(plots)} plots)")
