"""Lab sweep folders for the tests of the lab (tests/test_lab*.py), without running a whole sweep for each question.

A question's report, claims, tuning, plots and publish are functions of its sweep folder, and what its jobs record
is a function of one job. So most questions are tested on ONE real job (`quick_job`: train.py with the question's
quick overrides, each swept key pinned to one value), whose record the test checks, and on a sweep folder laid out
from copies of that job (or of a few) as `python -m zoo.lab run <name> --quick` would leave it (`sweep_of_copies`):
the plan of the multirun (multirun.yaml), then one folder per job of the quick grid with its overrides, its resolved
config and its result.json. The report of that folder runs the question's own table, plots, checks, reference and
tuning on the metrics real jobs of it record. Three questions still run their whole quick sweep (tests/test_lab.py,
QUICK).

`one_job` runs a question's job once per test session, for the tests of several files that read the same job.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml
from omegaconf import OmegaConf

from zoo.lab.questions.configs import QUESTIONS_DIR, question

from conftest import assert_ok, run_script

BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


def quick_job(name: str, run_dir: Path, env: dict | None = None, **point: str) -> dict:
    """One job of a question at `point` with its quick overrides (swept keys pinned to one value, the seed to 1 unless
    given); its result.json. `point` may name keys with dots: quick_job(name, dir, **{"model.net.norm": "none"})."""
    pinned = {"seed": "1", **point}
    overrides = [o for o in question(name)["quick"] if o.split("=", 1)[0] not in pinned]
    overrides += [f"{k}={v}" for k, v in pinned.items()] + ["lab.mode=quick", f"hydra.run.dir={run_dir}"]
    assert_ok(run_script("train.py", f"experiment=lab/{name}", *overrides, env=env))
    return json.loads((Path(run_dir) / "result.json").read_text(), parse_constant=float)


_JOBS: dict[tuple, Path] = {}


def one_job(tmp_path_factory, name: str, **point: str) -> tuple[Path, dict]:
    """`quick_job` run once per session for each (question, point): (its run folder, its result.json)."""
    key = (name, *sorted(point.items()))
    if key not in _JOBS:
        run_dir = tmp_path_factory.mktemp(f"job-{name}")
        quick_job(name, run_dir, **point)
        _JOBS[key] = run_dir
    run_dir = _JOBS[key]
    return run_dir, json.loads((run_dir / "result.json").read_text(), parse_constant=float)


def quick_plan(name: str, *extra: str) -> tuple[dict[str, str], list[str], list[list[str]]]:
    """(the question's sweeper params, the command line's overrides, each job's overrides) of
    `python -m zoo.lab run <name> --quick [extra...]`, built by Hydra's basic sweeper as the multirun builds them."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    config = OmegaConf.load(QUESTIONS_DIR / f"{name}.yaml")
    params = {str(k): str(v) for k, v in OmegaConf.to_container(config.hydra.sweeper.params).items()}
    task = [f"experiment=lab/{name}", *question(name)["quick"], "lab.mode=quick", *extra]
    overrides = OverridesParser.create().parse_overrides([*(f"{k}={v}" for k, v in params.items()), *task])
    jobs = [job for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]
    return params, task, jobs


def sweep_of_copies(job_dirs: Path | list[Path], sweep_dir: Path, *extra: str) -> Path:
    """A sweep folder as `python -m zoo.lab run <name> --quick [extra...]` leaves it, every job a copy of a real job of
    `job_dirs` (its result.json, resolved config and per-example records) under its own overrides: of the one that ran
    the job's point where one did, else of the first. The values its overrides set in the config are set in the
    copy's config too."""
    job_dirs = [job_dirs] if isinstance(job_dirs, Path) else list(job_dirs)
    configs = [OmegaConf.load(d / "config_resolved.yaml") for d in job_dirs]
    records = [json.loads((d / "result.json").read_text(), parse_constant=float) for d in job_dirs]
    params, task, jobs = quick_plan(configs[0].lab.name, *extra)
    swept = {k for k in _params(jobs[0]) if k != "seed" and len({_params(job).get(k) for job in jobs}) > 1}
    sweep_dir.mkdir(parents=True)
    plan = OmegaConf.merge(configs[0], {"hydra": {"sweeper": {"_target_": BASIC_SWEEPER, "params": params}}})
    OmegaConf.update(plan, "hydra.overrides.task", task)
    OmegaConf.save(plan, sweep_dir / "multirun.yaml")
    for number, overrides in enumerate(jobs):
        point = {k: v for k, v in _params(overrides).items() if k in swept}
        ran = [i for i, r in enumerate(records) if point.items() <= _params(r["overrides"]).items()]
        i = ran[0] if ran else 0
        source, config, record = job_dirs[i], configs[i], records[i]
        folder = sweep_dir / str(number)
        (folder / ".hydra").mkdir(parents=True)
        OmegaConf.save(OmegaConf.create(overrides), folder / ".hydra" / "overrides.yaml")
        own = config.copy()
        for key, value in _params(overrides).items():
            if OmegaConf.select(own, key, default=KeyError) is not KeyError:
                OmegaConf.update(own, key, yaml.safe_load(value), merge=False)
        OmegaConf.save(own, folder / "config_resolved.yaml")
        for entry in (record.get("per_example") or {}).values():
            shutil.copy(source / entry["file"], folder / entry["file"])
        (folder / "result.json").write_text(json.dumps({**record, "job": number, "overrides": overrides}))
    return sweep_dir


def _params(overrides: list[str]) -> dict[str, str]:
    return dict(str(o).split("=", 1) for o in overrides if "=" in str(o))
