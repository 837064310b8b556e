"""Putting a finished full-budget sweep into docs/lab.md: the measured table, the plots (copied to docs/lab/<name>/)
and the verdict exactly as the report computed them, with the machine they were measured on.

The text goes between the markers `<!-- measured:<name> -->` and `<!-- /measured:<name> -->` of the question's
section, so a later run replaces it and nothing in the document is typed by hand. Its first line says what kind of
run it was: a full run, or one with overrides (the command that made it), or an incomplete one.

Text and plots change together or not at all: the document and its folders are checked first, the plots are staged
beside docs/lab/<name>/, and only then are the folder and the document swapped in (the old plots come back when
writing the document fails)."""

from __future__ import annotations

import os
import platform
import re
import shlex
import shutil
import tempfile
from datetime import date
from pathlib import Path

import torch

from .report import build_report, changed_overrides, shown_overrides, wall_line, writable
from .sweep import Sweep, load_sweep


def machine_line() -> str:
    """The CPU (model name, cores, the kernels torch picks) and torch version: figures are only comparable on it."""
    model = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        names = re.findall(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(), flags=re.MULTILINE)
        model = names[0].strip() if names else model
    capability = torch.backends.cpu.get_cpu_capability()
    return f"{model}, {torch.get_num_threads()} threads, torch {torch.__version__} (CPU capability {capability})"


def markers(name: str) -> tuple[str, str]:
    return f"<!-- measured:{name} -->", f"<!-- /measured:{name} -->"


def split_at_markers(document: str, name: str, docs: Path) -> tuple[str, str]:
    """(the text before the question's opening marker, the text after its closing marker)."""
    begin, end = markers(name)
    if begin not in document or end not in document:
        raise ValueError(f"{docs} has no '{begin}' ... '{end}' markers; add them under the question's Measured heading")
    if document.count(begin) > 1 or document.count(end) > 1:
        raise ValueError(f"{docs}: '{begin}' or '{end}' appears more than once; keep one pair for '{name}'")
    before, rest = document.split(begin, 1)
    if end not in rest:
        raise ValueError(f"{docs}: '{end}' comes before '{begin}'; put the opening marker first")
    return before, rest.split(end, 1)[1]


def run_line(sweep: Sweep, name: str) -> str:
    """What kind of run the figures come from, when, on what, and the command that makes it again."""
    command = " ".join(["python -m zoo.lab run", name, *map(shlex.quote, shown_overrides(sweep))])
    kind = "Full run"
    if changed_overrides(sweep):
        kind = "Run with overrides (not the question's own budget or grid)"
    if sweep.unfinished:
        total = len(sweep.jobs) + len(sweep.unfinished)
        kind = f"Incomplete run ({len(sweep.unfinished)} of {total} jobs left no result, listed below)" + (
            ", with overrides" if changed_overrides(sweep) else ""
        )
    return f"{kind}, {date.today().isoformat()}, on {machine_line()}: `{command}`. {wall_line(sweep)}".rstrip()


def measured_block(sweep: Sweep, report: str, plots: list[Path], name: str) -> str:
    """The report from its measured table to the end of the verdict, under the run line; headings one level down,
    plot links pointing into docs/lab/<name>/."""
    lines = report.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("### Measured"))
    body = [line.replace("### ", "#### ", 1) if line.startswith("### ") else line for line in lines[start:]]
    text = "\n".join([run_line(sweep, name), "", *body])
    for path in plots:
        text = text.replace(f"]({path.name})", f"](lab/{name}/{path.name})")
    return text.rstrip() + "\n"


def _check_writable(docs: Path, image_dir: Path) -> None:
    if not writable(docs):
        raise ValueError(
            f"{docs} is read-only; make it writable (chmod u+w {docs}) or pass --docs with a writable copy"
        )
    folder = next(p for p in (image_dir, image_dir.parent, docs.parent) if p.exists())
    if not writable(folder):
        raise ValueError(f"{folder} is read-only and the plots go there; make it writable or pass --docs elsewhere")


def _write_atomically(path: Path, text: str) -> None:
    """A write cut short (disk full) leaves the document as it was."""
    target = path.resolve()
    tmp = target.with_name(f".{target.name}.publishing")
    try:
        tmp.write_text(text)
        shutil.copymode(target, tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def _swap_in(docs: Path, document: str, plots: list[Path], image_dir: Path) -> None:
    """Stage the plots, then swap the plot folder and the document in; on failure put the old folder back."""
    image_dir.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=f".{image_dir.name}-new-", dir=image_dir.parent))
    shutil.copymode(image_dir.parent, staged)  # mkdtemp makes it private (0700); the plots folder is not
    old = image_dir.with_name(f".{image_dir.name}-old")
    shutil.rmtree(old, ignore_errors=True)  # left by a publish that was killed half-way
    try:
        for path in plots:
            shutil.copy2(path, staged / path.name)
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
    """Replace the question's measured block of `docs` (a markdown file) with the sweep's; returns (name, outcome)."""
    docs = Path(docs)
    if not docs.is_file():
        raise ValueError(f"{docs} not found; pass --docs with the path of docs/lab.md")
    sweep = load_sweep(sweep_dir)
    if sweep.lab.get("mode") == "quick":
        raise ValueError(f"{sweep_dir} is a quick run (a budget of seconds); publish a full-budget sweep")
    name = sweep.lab.get("name")
    before, after = split_at_markers(docs.read_text(), name, docs)
    image_dir = docs.parent / "lab" / name
    _check_writable(docs, image_dir)
    try:
        report, outcome, plots = build_report(sweep)  # the plots are drawn in the sweep directory
        begin, end = markers(name)
        _swap_in(docs, f"{before}{begin}\n{measured_block(sweep, report, plots, name)}{end}{after}", plots, image_dir)
    except OSError as err:
        raise ValueError(f"{err.filename or docs}: {err.strerror or err}; nothing was published") from None
    return name, outcome
