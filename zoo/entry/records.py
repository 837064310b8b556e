"""What a run adds to its result.json beside the optimized metric: every scalar metric it logged, the torch threads
it ran with, the code it ran (`commit`) and what its callbacks recorded (a callback's `result_record()` returns
{"metrics": {...}, "series": {...}, "probes": {step: {...}}, "per_example": {...}}; the lab's probes do)."""

from __future__ import annotations

import math
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch

SECTIONS = ("metrics", "series", "probes", "per_example")
_CHECKOUT = Path(__file__).resolve().parents[2]


def code_version() -> str:
    """The checkout's commit (short hash, `+dirty` when tracked files differ), else the package version."""
    git = ["git", "-C", str(_CHECKOUT)]
    try:
        commit = subprocess.run([*git, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=10)
        if commit.returncode == 0:
            changed = subprocess.run(
                [*git, "status", "--porcelain", "-uno"], capture_output=True, text=True, timeout=10
            )
            return commit.stdout.strip() + ("+dirty" if changed.stdout.strip() else "")
    except (OSError, subprocess.TimeoutExpired):
        pass
    try:
        return f"transformer-zoo {version('transformer-zoo')}"
    except PackageNotFoundError:
        return "unknown"


def _scalar(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError, RuntimeError):  # non-scalar tensors, text
        return None
    return number if math.isfinite(number) else float("nan")


def run_record(trainer, metrics: dict) -> dict:
    """The final metrics, the threads (the process that reads the result may have others) and the callbacks'
    records, merged section by section (a probe's steps merged row by row: several probes log at the same steps)."""
    scalars = {k: v for k, v in ((k, _scalar(v)) for k, v in metrics.items()) if v is not None}
    records = [{"metrics": {**scalars, "threads": float(torch.get_num_threads())}}]
    records += [cb.result_record() for cb in trainer.callbacks if hasattr(cb, "result_record")]
    merged: dict[str, dict] = {}
    for record in records:
        for section, values in record.items():
            if section == "probes":
                for step, row in values.items():
                    merged.setdefault(section, {}).setdefault(step, {}).update(row)
            else:
                merged.setdefault(section, {}).update(values)
    return {"commit": code_version(), **{k: merged[k] for k in SECTIONS if k in merged}}
