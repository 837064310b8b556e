"""Putting a finished full-budget sweep into docs/lab.md: the measured table, the plots (copied to docs/lab/<name>/)
and the verdict exactly as the report computed them, with the machine they were measured on.

The text goes between the markers `<!-- measured:<name> -->` and `<!-- /measured:<name> -->` of the question's
section, so a later run replaces it and nothing in the document is typed by hand."""

from __future__ import annotations

import platform
import re
import shutil
from datetime import date
from pathlib import Path

import torch

from .report import build_report
from .sweep import load_sweep


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


def measured_text(sweep_dir: str | Path, docs_dir: Path) -> tuple[str, str, str]:
    """(question name, markdown from the measured table to the end of the verdict, outcome); the plots are copied
    to docs_dir/lab/<name>/."""
    sweep = load_sweep(sweep_dir)
    if sweep.lab.get("mode") == "quick":
        raise ValueError(f"{sweep_dir} is a quick run (a budget of seconds); publish a full-budget sweep")
    name = sweep.lab.get("name")
    text, outcome, plots = build_report(sweep)
    image_dir = docs_dir / "lab" / name
    image_dir.mkdir(parents=True, exist_ok=True)
    for path in plots:
        shutil.copy2(path, image_dir / path.name)
        text = text.replace(f"]({path.name})", f"](lab/{name}/{path.name})")
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("### Measured"))
    wall = next((line.split("`. ", 1)[-1] for line in lines if line.startswith("Sweep: `")), "")
    body = [line.replace("### ", "#### ", 1) if line.startswith("### ") else line for line in lines[start:]]
    header = [
        f"Full run, {date.today().isoformat()}, on {machine_line()}: `python -m zoo.lab run {name}`. {wall}".rstrip(),
        "",
    ]
    return name, "\n".join(header + body).rstrip() + "\n", outcome


def publish(sweep_dir: str | Path, docs: str | Path) -> tuple[str, str]:
    """Replace the question's measured block of `docs` (a markdown file) with the sweep's; returns (name, outcome)."""
    docs = Path(docs)
    if not docs.is_file():
        raise ValueError(f"{docs} not found; pass --docs with the path of docs/lab.md")
    name, block, outcome = measured_text(sweep_dir, docs.parent)
    begin, end = markers(name)
    document = docs.read_text()
    if begin not in document or end not in document:
        raise ValueError(f"{docs} has no '{begin}' ... '{end}' markers; add them under the question's Measured heading")
    before, rest = document.split(begin, 1)
    _, after = rest.split(end, 1)
    docs.write_text(f"{before}{begin}\n{block}{end}{after}")
    return name, outcome
