"""Putting a finished full-budget sweep into docs/lab.md: its result (the decision's facts, the report from its
measured table on, and the run) as docs/lab/<folder>/result.json beside its plots and per-seed CSV, then the page
rendered again (page.py). Files and page change together or not at all: checked first, staged beside the folder,
then swapped in (the old folder comes back when writing the page fails)."""

from __future__ import annotations

import hashlib
import json
import platform
import re
import shutil
import tempfile
from datetime import date
from pathlib import Path

import torch
from omegaconf import OmegaConf

from zoo.data.atomic import replacing

from ..decide.sweep import Sweep, load_sweep
from ..questions.budgets import run_budget
from .page import RESULT, budget_folder, load_results, markers, page_paths, render
from .report import PER_SEED_CSV, build_report, changed_overrides, run_command, wall_line, writable


def machine_line(sweep: Sweep | None = None) -> str:
    """The CPU (model, the jobs' threads as recorded, else this process's; the kernels torch picks), the GPU if any,
    and torch's version: figures are only comparable on it."""
    model = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        names = re.findall(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(), flags=re.MULTILINE)
        model = names[0].strip() if names else model
    capability = torch.backends.cpu.get_cpu_capability()
    recorded = {j.metrics["threads"] for j in sweep.jobs if "threads" in j.metrics} if sweep else set()
    threads = "/".join(f"{t:g}" for t in sorted(recorded)) if recorded else str(torch.get_num_threads())
    threads += " thread" if threads == "1" else " threads"
    line = f"{model}, {threads}, torch {torch.__version__} (CPU capability {capability})"
    if torch.cuda.is_available():
        line += f", GPU {torch.cuda.get_device_name(0)}"
    return line


def run_facts(sweep: Sweep, name: str) -> dict:
    kind = "Full run"
    if changed_overrides(sweep):
        kind = "Run with overrides (not the question's own budget or grid)"
    if sweep.unfinished:
        total = len(sweep.job_dirs()) + len(sweep.unfinished)
        kind = f"Incomplete run ({len(sweep.unfinished)} of {total} jobs left no result, listed below)" + (
            ", with overrides" if changed_overrides(sweep) else ""
        )
    budget = sweep.lab.get("budget")
    if run_budget(sweep.lab):  # one of the question's other budgets: which, whatever else the run changed
        kind += f" at budget `{budget}`" if kind == "Full run" else f", from budget `{budget}`"
    elif budget is not None and kind == "Full run":  # a run with overrides is not the own budget as it stands
        kind += f" at budget `{budget}` (the question's own)"
    return {
        "kind": kind,
        "date": date.today().isoformat(),
        "machine": machine_line(sweep),
        "command": run_command(sweep, name),
        "wall": wall_line(sweep),
        **sweep_facts(sweep),
    }


def sweep_facts(sweep: Sweep) -> dict:
    """The jobs' commits, a hash of the sweep's config (multirun.yaml less Hydra's section), the jobs at once and the
    sweep's wall time (first job's start to last job's result)."""
    commits = sorted({j.commit for j in sweep.jobs if j.commit})
    multirun = sweep.directory / "multirun.yaml"
    config = OmegaConf.load(multirun) if multirun.is_file() else OmegaConf.create()
    launcher = OmegaConf.select(config, "hydra.launcher", default=None)
    at_once = OmegaConf.select(launcher, "n_jobs", default=None) if launcher is not None else None
    config.pop("hydra", None)
    text = OmegaConf.to_yaml(config, sort_keys=True)
    starts = [f.stat().st_mtime for d in sweep.job_dirs() if (f := d / ".hydra" / "config.yaml").is_file()]
    ends = [f.stat().st_mtime for d in sweep.job_dirs() if (f := d / "result.json").is_file()]
    return {
        "commit": ", ".join(commits) or "not recorded",
        "config_hash": hashlib.sha256(text.encode()).hexdigest()[:12],
        "jobs_at_once": int(at_once) if isinstance(at_once, int) else 1,
        "sweep_wall_s": round(max(ends) - min(starts)) if starts and ends else None,
    }


def _check_writable(docs: Path, image_dir: Path) -> None:
    if not writable(docs):
        raise ValueError(
            f"{docs} is read-only; make it writable (chmod u+w {docs}) or pass --docs with a writable copy"
        )
    folder = next(p for p in (image_dir, image_dir.parent, docs.parent) if p.exists())
    if not writable(folder):
        raise ValueError(f"{folder} is read-only and the plots go there; make it writable or pass --docs elsewhere")


def _write_atomically(path: Path, text: str) -> None:
    target = path.resolve()
    with replacing(target) as tmp:
        tmp.write_text(text)
        shutil.copymode(target, tmp)


def _swap_in(docs: Path, document: str, files: list[Path], result: dict, image_dir: Path) -> None:
    """Stage the files and the result, then swap the folder and the page in; on failure the old folder goes back."""
    image_dir.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=f".{image_dir.name}-new-", dir=image_dir.parent))
    shutil.copymode(image_dir.parent, staged)  # mkdtemp makes it private (0700); the plots folder is not
    old = image_dir.with_name(f".{image_dir.name}-old")
    shutil.rmtree(old, ignore_errors=True)  # left by a publish that was killed half-way
    try:
        for path in files:
            shutil.copy2(path, staged / path.name)
        (staged / RESULT).write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
        if image_dir.exists():
            image_dir.rename(old)
        staged.rename(image_dir)
        _write_atomically(docs, document)
    except OSError:
        if not staged.exists():  # the new plots went in: take them out
            shutil.rmtree(image_dir, ignore_errors=True)
        if old.exists():
            old.rename(image_dir)
        shutil.rmtree(staged, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)


def publish(sweep_dir: str | Path, docs: str | Path) -> tuple[str, str]:
    """Write the sweep's result into docs/lab/<folder>/ and render the page again; returns (name, outcome)."""
    docs, lab_dir = page_paths(docs)
    sweep = load_sweep(sweep_dir)
    if sweep.lab.get("mode") == "quick":
        raise ValueError(f"{sweep_dir} is a quick run (a budget of seconds); publish a full-budget sweep")
    name = sweep.lab.get("name")
    budget = run_budget(sweep.lab)
    text = docs.read_text()
    check_markers(text, name, docs)  # a budget's block goes beside the question's main section
    folder = budget_folder(name, budget) if budget else name
    image_dir = lab_dir / folder
    _check_writable(docs, image_dir)
    try:
        report, facts, plots = build_report(sweep)  # the plots and the per-seed CSV go into the sweep directory
        files = [*plots, sweep.directory / PER_SEED_CSV]
        lines = report.splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith("### Measured"))
        result = {
            "question": name,
            "budget": budget,
            "run": run_facts(sweep, name),
            "facts": facts,
            "files": [p.name for p in files],
            "report": lines[start:],
        }
        results = load_results(lab_dir)
        results[name + (f"@{budget}" if budget else "")] = {**result, "folder": folder}
        _swap_in(docs, render(text, results), files, result, image_dir)
    except OSError as err:
        raise ValueError(f"{err.filename or docs}: {err.strerror or err}; nothing was published") from None
    return name, facts["outcome"]


def check_markers(document: str, name: str, docs: Path) -> None:
    begin, end = markers(name)
    if begin not in document or end not in document:
        raise ValueError(f"{docs} has no '{begin}' ... '{end}' markers; add them under the question's Measured heading")
    if document.count(begin) > 1 or document.count(end) > 1:
        raise ValueError(f"{docs}: '{begin}' or '{end}' appears more than once; keep one pair for '{name}'")
    if document.index(end) < document.index(begin):
        raise ValueError(f"{docs}: '{end}' comes before '{begin}'; put the opening marker first")


def write_page(docs: str | Path) -> int:
    """Render docs/lab.md again from its results; returns how many it shows."""
    docs, lab_dir = page_paths(docs)
    results = load_results(lab_dir)
    before = docs.read_text()
    after = render(before, results)
    if after != before:
        if not writable(docs):
            raise ValueError(f"{docs} is read-only; make it writable (chmod u+w {docs})")
        _write_atomically(docs, after)
    return len(results)
