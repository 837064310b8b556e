"""A lab sweep read back from disk: each job's result.json grouped into points (a setting of the swept parameters,
one value per seed), the jobs that left no result (against the plan Hydra's basic sweeper wrote in multirun.yaml,
which also refuses a folder that mixes two sweeps), and the question's `lab` section. A job of several arms
(`arms` in its result.json, zoo/lab/measure/timing.py) is read as one job per arm."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml
from omegaconf import DictConfig, OmegaConf

from .claims import Stat, canonical_value

FAILED = "failed.json"  # what a job that failed leaves (zoo.entry.sweep_summary; the lab does not import entries)
RERUN = "re-run the sweep into a fresh hydra.sweep.dir"


@dataclass(frozen=True)
class PerExample:
    """A job's record of which dev examples it got right (zoo/lab/probes/per_example.py)."""

    path: Path
    n: int  # examples in the validation pass
    of: int  # examples in the dev set (n < of: limit_val_batches cut the pass short)
    examples: str  # which examples: two records pair only when this agrees

    def correct(self) -> np.ndarray | None:
        """One boolean per example in the dev set's order; None when the file is gone or is not it."""
        try:
            vector = np.load(self.path, allow_pickle=False)
        except (OSError, ValueError):
            return None
        return vector if vector.dtype == bool and vector.shape == (self.n,) else None


@dataclass
class Job:
    directory: Path
    params: dict[str, str]  # every override of the job (swept or not), as Hydra wrote it
    metrics: dict[str, float]
    series: dict[str, list[float]]
    wall_s: float | None
    arms: list[dict] = field(default_factory=list)  # a job of several arms, before load_sweep splits it
    per_example: dict[str, PerExample] = field(default_factory=dict)  # metric -> its per-example record
    commit: str | None = None  # the code the job ran (zoo.entry.records.code_version)


@dataclass
class Unfinished:
    """A job of the sweep without a result: it failed, was stopped, or never started."""

    name: str  # its folder's name (the job number), or "#<n>" for a planned job without a folder
    params: dict[str, str] | None  # None: its overrides are unknown (it may be any point)
    why: str


@dataclass
class Sweep:
    directory: Path
    lab: dict
    jobs: list[Job]
    swept: list[str]  # parameters that differ between jobs, the seed excluded
    points: dict[tuple, dict[str, str]]  # point key -> its parameters
    members: dict[tuple, list[Job]]  # point key -> its jobs (one per seed)
    unfinished: list[Unfinished] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)  # the command line's overrides (multirun.yaml)

    def stat(self, key: tuple, metric: str) -> Stat | None:
        values = [j.metrics[metric] for j in self.members[key] if metric in j.metrics]
        return Stat.of(values) if values else None

    def samples(self, metrics: list[str]) -> dict[tuple, dict[str, dict[str, float]]]:
        """point -> metric -> {seed: value}: what the checks test (two points that ran the same seeds are paired)."""
        return self._by_seed(metrics, lambda job: job.metrics)

    def per_example(self, metrics: list[str]) -> dict[tuple, dict[str, dict[str, PerExample]]]:
        """point -> metric -> {seed: its per-example record}, keyed by seed as `samples` is."""
        return self._by_seed(metrics, lambda job: job.per_example)

    def _by_seed(self, metrics: list[str], read) -> dict[tuple, dict[str, dict]]:
        seed_key = self.lab.get("seed_key", "seed")
        out: dict[tuple, dict[str, dict]] = {}
        for key, jobs in self.members.items():
            # a job without a seed parameter is told apart by its folder: it pairs with nothing
            seeds = [j.params.get(seed_key, f"job {j.directory.name}") for j in jobs]
            by_metric = ({s: read(j)[m] for s, j in zip(seeds, jobs) if m in read(j)} for m in metrics)
            out[key] = {m: values for m, values in zip(metrics, by_metric) if values}
        return out

    def job_dirs(self) -> list[Path]:
        """The job folders (a job of several arms is one folder but several `jobs`)."""
        return list(dict.fromkeys(j.directory for j in self.jobs))

    def label(self, key: tuple) -> str:
        params = self.points[key]
        return ", ".join(f"{short(k)}={params.get(k, '')}" for k in self.swept) or "all"


def short(param: str) -> str:
    """'model.net.attn_scale' -> 'attn_scale': table headers and legends stay readable."""
    return param.rsplit(".", 1)[-1]


def _wall_time(job_dir: Path) -> float | None:
    """Seconds from the job's composed config (written by Hydra at its start) to its result.json."""
    start, end = job_dir / ".hydra" / "config.yaml", job_dir / "result.json"
    if start.is_file() and end.is_file():
        return max(0.0, end.stat().st_mtime - start.stat().st_mtime)
    return None


def read_yaml(path: Path):
    try:
        return OmegaConf.load(path)
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        problem = f"{getattr(err, 'problem', None) or 'not YAML'}" + (f" at line {where.line + 1}" if where else "")
        raise ValueError(f"{path}: damaged ({problem}); {RERUN}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not readable ({err}); {RERUN}") from None


def read_json(path: Path) -> dict:
    try:
        record = json.loads(path.read_text())
    except json.JSONDecodeError as err:  # a job cut off while writing it leaves half a file
        raise ValueError(f"{path}: not valid JSON ({err.msg}, line {err.lineno}); {RERUN}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not readable ({err}); {RERUN}") from None
    if not isinstance(record, dict):
        raise ValueError(f"{path}: not a job's record (a JSON object); {RERUN}")
    return record


def lab_section(directory: Path) -> dict:
    for candidate in [*sorted(directory.glob("*/config_resolved.yaml")), directory / "multirun.yaml"]:
        if candidate.is_file():
            config = read_yaml(candidate)
            lab = config.get("lab") if isinstance(config, DictConfig) else None
            if lab is not None:
                return OmegaConf.to_container(lab, resolve=False)
    raise ValueError(
        f"{directory} is not a lab sweep: no job config with a `lab` section (run `python -m zoo.lab run <name>` "
        "or `python train.py -m experiment=lab/<name>`)"
    )


def _holds_a_job(folder: Path) -> bool:
    return any((folder / name).exists() for name in ("result.json", FAILED, ".hydra"))


def _params(overrides) -> dict[str, str]:
    return dict(str(o).split("=", 1) for o in overrides or [] if "=" in str(o))


def _planned(multirun: Path) -> tuple[list[dict[str, str]] | None, list[str]]:
    """(the parameters of every job the multirun was to run, None when unknown; the command line's overrides)."""
    if not multirun.is_file():
        return None, []
    config = read_yaml(multirun)
    hydra = config.get("hydra") if isinstance(config, DictConfig) else None
    plan = OmegaConf.to_container(hydra, resolve=False) if isinstance(hydra, DictConfig) else {}
    sweeper = plan.get("sweeper") or {}
    task = [str(o) for o in (plan.get("overrides") or {}).get("task") or []]
    if not str(sweeper.get("_target_", "")).endswith("BasicSweeper"):
        return None, task  # another sweeper (Optuna) chooses its jobs as it goes: no plan to compare with
    # the job list exactly as the basic sweeper builds it: its params, then the command line (the last value wins)
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    arguments = [f"{k}={v}" for k, v in (sweeper.get("params") or {}).items()] + task
    try:
        overrides = OverridesParser.create().parse_overrides(arguments)
        jobs = BasicSweeper.split_arguments(overrides, None)
    except Exception:  # e.g. a glob() sweep, which needs Hydra's config loader: no plan to compare with
        return None, task
    return [_params(job) for batch in jobs for job in batch], task


def _read_job(folder: Path, planned: list[dict[str, str]] | None) -> Job | Unfinished:
    result, failed = folder / "result.json", folder / FAILED
    if failed.is_file() and (not result.is_file() or failed.stat().st_mtime > result.stat().st_mtime):
        record = read_json(failed)
        error = " ".join(str(record.get("error", "no error recorded")).split())
        return Unfinished(folder.name, _params(record.get("overrides")) or None, f"failed: {error[:300]}")
    if not result.is_file():
        started = folder / ".hydra" / "overrides.yaml"
        params = (_params(read_yaml(started)) if started.is_file() else None) or None
        if params is None and planned is not None and folder.name.isdigit() and int(folder.name) < len(planned):
            params = planned[int(folder.name)]
        return Unfinished(folder.name, params, "no result.json (stopped, or still running)")
    record = read_json(result)
    value = record.get("value")
    if not isinstance(record.get("metric"), str) or not (value is None or _number(value)):
        raise ValueError(
            f"{result}: needs 'metric' (a name) and 'value' (a number or null), as train.py writes them; {RERUN}"
        )
    params = _params(record.get("overrides"))
    metrics = {k: float(v) for k, v in (record.get("metrics") or {}).items() if _number(v)}
    metrics.setdefault(record["metric"], float("nan") if value is None else float(value))
    arms = record.get("arms") or []
    if not isinstance(arms, list) or not all(isinstance(a, dict) and isinstance(a.get("params"), dict) for a in arms):
        raise ValueError(f"{result}: 'arms' must be a list of {{params, metrics}}; {RERUN}")
    per_example = _per_example(folder, record, metrics)
    series, commit = record.get("series") or {}, record.get("commit")
    return Job(folder, params, metrics, series, _wall_time(folder), arms, per_example, commit)


def _per_example(folder: Path, record: dict, metrics: dict[str, float]) -> dict[str, PerExample]:
    """The job's per-example records whose accuracy is the job's value of the metric (of the same pass)."""
    found = {}
    entries = record.get("per_example")
    for metric, entry in entries.items() if isinstance(entries, dict) else ():
        try:
            n, of, accuracy = int(entry["n"]), int(entry["of"]), float(entry["accuracy"])
            path, examples = folder / str(entry["file"]), str(entry["examples"])
        except (TypeError, KeyError, ValueError):
            continue
        # val/acc is a float32 ratio of counts: 1e-6 tells it from any other count of the same n
        if n > 0 and metric in metrics and abs(metrics[metric] - accuracy) <= 1e-6:
            found[metric] = PerExample(path, n, of, examples)
    return found


def _split_arms(job: Job) -> list[Job]:
    """One entry per arm: the job's parameters and metrics, then the arm's own; the job's time counts once."""
    if not job.arms:
        return [job]
    split = []
    for i, arm in enumerate(job.arms):
        params = {**job.params, **{str(k): canonical_value(v) for k, v in arm["params"].items()}}
        metrics = {**job.metrics, **{k: float(v) for k, v in (arm.get("metrics") or {}).items() if _number(v)}}
        series = {**job.series, **(arm.get("series") or {})}
        wall = job.wall_s if i == 0 else None
        split.append(Job(job.directory, params, metrics, series, wall, commit=job.commit))
    return split


def _mixed(directory: Path, folder: str, params: dict[str, str], why: str) -> ValueError:
    shown = " ".join(f"{k}={v}" for k, v in params.items())
    return ValueError(f"{directory} mixes jobs of more than one sweep: job folder {folder} ({shown}) {why}; {RERUN}")


def load_sweep(directory: str | Path) -> Sweep:
    directory = Path(directory)
    if not directory.is_dir():
        raise ValueError(f"sweep directory not found: {directory}")
    lab = lab_section(directory)
    seed_key = lab.get("seed_key", "seed")
    planned, command_overrides = _planned(directory / "multirun.yaml")
    folders = [d for d in directory.iterdir() if d.is_dir() and (d.name.isdigit() or _holds_a_job(d))]
    jobs: list[Job] = []
    unfinished: list[Unfinished] = []
    seen: dict[tuple, str] = {}
    for folder in sorted(folders, key=lambda d: (0, int(d.name)) if d.name.isdigit() else (1, d.name)):
        job = _read_job(folder, planned)
        (jobs if isinstance(job, Job) else unfinished).append(job)
        if job.params is None:
            continue
        identity = tuple(sorted(job.params.items()))
        if identity in seen:
            raise _mixed(directory, folder.name, job.params, f"ran the same job as folder {seen[identity]}")
        if planned is not None and job.params not in planned:
            raise _mixed(directory, folder.name, job.params, "is not a job of the sweep in multirun.yaml")
        seen[identity] = folder.name
    for number, params in enumerate(planned or []):
        if tuple(sorted(params.items())) not in seen:
            unfinished.append(Unfinished(f"#{number}", params, "missing (never started)"))
    jobs = [arm for job in jobs for arm in _split_arms(job)]
    if not jobs:
        raise ValueError(
            f"no job of {directory} wrote a result.json (did every job fail? {len(unfinished)} without a result); "
            "see the job logs there"
        )
    keys = sorted({k for j in jobs for k in j.params if k != seed_key})
    swept = [k for k in keys if len({j.params.get(k) for j in jobs}) > 1]
    points: dict[tuple, dict[str, str]] = {}
    members: dict[tuple, list[Job]] = {}
    for job in jobs:  # points in the order of their first job
        key = tuple(job.params.get(k, "") for k in keys)
        points.setdefault(key, {k: job.params[k] for k in keys if k in job.params})
        members.setdefault(key, []).append(job)
    if planned is None:  # no plan: the overrides every job shares are the command line's, as far as we can tell
        command_overrides = [f"{k}={v}" for k, v in jobs[0].params.items() if all(j.params.get(k) == v for j in jobs)]
    return Sweep(directory, lab, jobs, swept, points, members, unfinished, command_overrides)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)  # NaN stays: a diverged run
