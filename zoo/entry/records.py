"""What a run adds to its result.json beside the optimized metric: every scalar metric it logged, the torch threads
it ran with, the code it ran (`commit`: the git commit of the checkout, `+dirty` when files differ from it; the
package version outside a checkout), and what its callbacks recorded (a callback with a `result_record()` method returns
{"metrics": {...}, "series": {...}, "probes": {step: {...}}, "per_example": {...}}; the lab's probes do)."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import torch

SECTIONS = ("metrics", "series", "probes", "per_example")
_CHECKOUT = Path(__file__).resolve().parents[2]


def code_version() -> str:
    """The commit the code came from (short hash, `+dirty` when tracked files differ), else the package version."""
    try:
        git = ["git", "-C", str(_CHECKOUT)]
        commit = subprocess.run([*git, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=10)
        if commit.returncode == 0:
            changed = subprocess.run(
                [*git, "status", "--porcelain", "-uno"], capture_output=True, text=True, timeout=10
            )
            return commit.stdout.strip() + ("+dirty" if changed.stdout.strip() else "")
    except (OSError, subprocess.TimeoutExpired):
        pass
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"transformer-zoo {version('transformer-zoo')}"
    except PackageNotFoundError:
        return "unknown"


def scalar_metrics(metrics: dict) -> dict[str, float]:
    out = {}
    for name, value in metrics.items():
        try:
            number = float(value)
        except (TypeError, ValueError, RuntimeError):  # non-scalar tensors, text
            continue
        out[name] = number if math.isfinite(number) else float("nan")
    return out


def merge_records(records: list[dict]) -> dict:
    """Union of the callbacks' records, section by section (metrics, series, probes)."""
    merged: dict[str, dict] = {}
    for record in records:
        for section, values in record.items():
            if section == "probes":  # step -> values: several probes log at the same steps
                for step, row in values.items():
                    merged.setdefault(section, {}).setdefault(step, {}).update(row)
            else:
                merged.setdefault(section, {}).update(values)
    return merged


def run_record(trainer, metrics: dict) -> dict:
    """The trainer's final metrics, the threads (a published figure states them, and the process that reads the
    result may have other) and the callbacks' records."""
    records = [cb.result_record() for cb in trainer.callbacks if hasattr(cb, "result_record")]
    threads = {"threads": float(torch.get_num_threads())}
    merged = merge_records([{"metrics": {**scalar_metrics(metrics), **threads}}, *records])
    return {"commit": code_version(), **{k: merged[k] for k in SECTIONS if k in merged}}
