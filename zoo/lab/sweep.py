"""A lab sweep read back from disk: each job's result.json, grouped into points (a setting of the swept
parameters) with one value per seed; and the question's `lab` section of the config."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from .claims import Stat


@dataclass
class Job:
    directory: Path
    params: dict[str, str]  # every override of the job (swept or not), as Hydra wrote it
    metrics: dict[str, float]
    series: dict[str, list[float]]
    wall_s: float | None


@dataclass
class Sweep:
    directory: Path
    lab: dict
    jobs: list[Job]
    swept: list[str]  # parameters that differ between jobs, the seed excluded
    points: dict[tuple, dict[str, str]]  # point key -> its parameters
    members: dict[tuple, list[Job]]  # point key -> its jobs (one per seed)

    def stat(self, key: tuple, metric: str) -> Stat | None:
        values = [j.metrics[metric] for j in self.members[key] if metric in j.metrics]
        return Stat.of(values) if values else None

    def stats(self, metrics: list[str]) -> dict[tuple, dict[str, Stat]]:
        out: dict[tuple, dict[str, Stat]] = {}
        for key in self.points:
            out[key] = {m: s for m in metrics if (s := self.stat(key, m)) is not None}
        return out

    def label(self, key: tuple) -> str:
        params = self.points[key]
        return ", ".join(f"{short(k)}={params.get(k, '')}" for k in self.swept) or "all"


def short(param: str) -> str:
    """'model.net.attn_scale' -> 'attn_scale': table headers and legends stay readable."""
    return param.rsplit(".", 1)[-1]


def _job_order(path: Path):
    name = path.parent.name
    return (0, int(name)) if name.isdigit() else (1, name)


def _wall_time(job_dir: Path) -> float | None:
    """Seconds from the job's composed config (written by Hydra at its start) to its result.json."""
    start, end = job_dir / ".hydra" / "config.yaml", job_dir / "result.json"
    if start.is_file() and end.is_file():
        return max(0.0, end.stat().st_mtime - start.stat().st_mtime)
    return None


def lab_section(directory: Path) -> dict:
    for candidate in [*sorted(directory.glob("*/config_resolved.yaml")), directory / "multirun.yaml"]:
        if candidate.is_file():
            lab = OmegaConf.load(candidate).get("lab")
            if lab is not None:
                return OmegaConf.to_container(lab, resolve=False)
    raise ValueError(
        f"{directory} is not a lab sweep: no job config with a `lab` section (run `python -m zoo.lab run <name>` "
        "or `python train.py -m experiment=lab/<name>`)"
    )


def load_sweep(directory: str | Path) -> Sweep:
    directory = Path(directory)
    if not directory.is_dir():
        raise ValueError(f"sweep directory not found: {directory}")
    lab = lab_section(directory)
    seed_key = lab.get("seed_key", "seed")
    jobs = []
    for path in sorted(directory.glob("*/result.json"), key=_job_order):
        record = json.loads(path.read_text())
        params = dict(o.split("=", 1) for o in record.get("overrides", []) if "=" in o)
        metrics = {k: float(v) for k, v in record.get("metrics", {}).items() if _number(v)}
        metrics.setdefault(record["metric"], float("nan") if record["value"] is None else float(record["value"]))
        jobs.append(Job(path.parent, params, metrics, record.get("series", {}), _wall_time(path.parent)))
    if not jobs:
        raise ValueError(f"no job of {directory} wrote a result.json (did every job fail?); see the job logs there")
    keys = sorted({k for j in jobs for k in j.params if k != seed_key})
    swept = [k for k in keys if len({j.params.get(k) for j in jobs}) > 1]
    points: dict[tuple, dict[str, str]] = {}
    members: dict[tuple, list[Job]] = {}
    for job in jobs:  # points in the order of their first job
        key = tuple(job.params.get(k, "") for k in keys)
        points.setdefault(key, {k: job.params[k] for k in keys if k in job.params})
        members.setdefault(key, []).append(job)
    return Sweep(directory, lab, jobs, swept, points, members)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)  # NaN stays: a diverged run
