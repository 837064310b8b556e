"""Which earlier run a start with `auto_resume=true` or `ckpt_path=last` continues: its own, never another job's.

A task's runs share `logs/<task_name>/runs/`. A start continues the run started with the same command-line overrides
(recorded in `.hydra/overrides.yaml` and `.hydra/resume-<time>/overrides.yaml`), IGNORED_KEYS aside; a run of
another length (LENGTH_KEYS) counts when none matches exactly. When several runs match, the SLURM job they ran in
(the same after a requeue) decides; if it does not, the start is refused in one line naming them.

A run is finished when it trained to this start's `trainer.max_steps` and wrote its result after its newest
checkpoint (or has none to write, `optimized_metric=null`); bounded by epochs, when its result.json is newer than
its newest checkpoint. A finished run is never continued into a second result.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

# How a start resumes, and where runs are looked for (the runs found lie there already): never what a run is.
IGNORED_KEYS = ("ckpt_path", "auto_resume", "task_name", "paths.log_dir")
# How long a run trains: a start that asks for more steps continues a run started with fewer.
LENGTH_KEYS = ("trainer.max_steps", "trainer.max_epochs", "trainer.max_time")
LAUNCHER_FILE = "launcher.json"  # the SLURM ids of a start, beside its overrides.yaml
SLURM_VARIABLES = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID")


class RunFinished(Exception):  # noqa: N818  (a way out of a start that has nothing to do, not an error)
    """auto_resume found this start's run finished: nothing is started, and the command succeeds with `value`, the
    result the run recorded for the optimized metric (what a sweeper gets back)."""

    def __init__(self, message: str, value: float | None = None) -> None:
        super().__init__(message)
        self.value = value


@lru_cache(maxsize=1024)  # read again when train.py checks the directory zoo.run_dir chose; callers never change it
def _parse(overrides: tuple[str, ...]) -> dict[str, str]:
    """key -> value of each override, as Hydra reads them (`lr=1e-3` and `lr=0.001` are one value; `+key=` and
    `++key=` one key), minus IGNORED_KEYS."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser, parsed = OverridesParser.create(), {}
    for text in overrides:
        try:
            (override,) = parser.parse_overrides([text])
            key = override.key_or_group + (f"@{override.package}" if override.package else "")
            value = "~" if override.is_delete() else override.get_value_element_as_str()
        except HydraException:  # a sweep or a form the parser does not read back: compared as written
            key, _, value = text.partition("=")
            key = key.lstrip("+~")
        if key not in IGNORED_KEYS:
            parsed[key] = value
    return parsed


def _without_length(parsed: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in parsed.items() if k not in LENGTH_KEYS}


def _read_list(path: Path) -> list[str] | None:
    try:
        value = OmegaConf.to_container(OmegaConf.load(path))
    except Exception:  # unreadable: the start is not known, so the run cannot be told to be this one
        return None
    return [str(v) for v in value] if isinstance(value, list) else None


def run_starts(run: Path) -> list[Path]:
    """The folders of a run's starts that recorded their overrides: `.hydra/`, then `.hydra/resume-*/`."""
    configs = run / ".hydra"
    folders = [configs, *sorted(configs.glob("resume-*"))] if configs.is_dir() else []
    return [f for f in folders if (f / "overrides.yaml").is_file()]


def launcher_ids(environ=None) -> set[str]:
    """The ids a SLURM job keeps across a requeue (its job id, its array job and task); empty outside SLURM."""
    env = os.environ if environ is None else environ
    ids = set()
    if env.get("SLURM_JOB_ID"):
        ids.add(f"job {env['SLURM_JOB_ID']}")
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        ids.add(f"array {env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}")
    return ids


def record_launcher(configs: Path) -> None:
    found = {name: os.environ[name] for name in SLURM_VARIABLES if os.environ.get(name)}
    if found:
        (configs / LAUNCHER_FILE).write_text(json.dumps(found) + "\n")


def _recorded_launcher_ids(run: Path) -> set[str]:
    ids = set()
    for folder in run_starts(run):
        try:
            ids |= launcher_ids(json.loads((folder / LAUNCHER_FILE).read_text()))
        except (OSError, ValueError, AttributeError):
            continue
    return ids


@dataclass
class Match:
    run: Path
    exact: bool  # started with the same overrides, its length included
    checkpoint: Path | None = None  # the newest usable one
    step: int = 0
    skipped: list[str] = field(default_factory=list)  # "<path> (why)" for each checkpoint passed over


@dataclass
class Decision:
    chosen: Match | None  # the one run this start continues
    ambiguous: list[Match]  # several runs this start could continue (then `chosen` is None)
    matching: list[Match]  # every run started with these overrides, with or without a usable checkpoint
    others: list[str]  # "<run> (how its overrides differ)" for runs of other overrides that hold checkpoints


def find_run(runs_root: str | Path, overrides: list[str]) -> Decision:
    from zoo.checkpointing.choosing import checkpoint_files, choose_checkpoint

    root = Path(runs_root)
    runs = sorted(d for d in root.iterdir() if d.is_dir()) if root.is_dir() else []
    mine = _parse(tuple(overrides))
    matching, others = [], []
    for run in runs:
        starts = [s for s in (_read_list(f / "overrides.yaml") for f in run_starts(run)) if s is not None]
        theirs = [_parse(tuple(s)) for s in starts]
        exact = any(t == mine for t in theirs)
        if exact or any(_without_length(t) == _without_length(mine) for t in theirs):
            match = Match(run, exact)
            match.checkpoint, match.step, match.skipped = choose_checkpoint(checkpoint_files(run))
            matching.append(match)
        elif theirs and checkpoint_files(run):
            others.append(f"{run} ({_difference(theirs[0], mine)})")
    usable = [m for m in matching if m.checkpoint is not None]
    exact = [m for m in usable if m.exact]
    pool = exact or usable
    if len(pool) > 1 and launcher_ids():  # the same SLURM job (requeued) tells its run from the others
        pool = [m for m in pool if _recorded_launcher_ids(m.run) & launcher_ids()] or pool
    if len(pool) == 1:
        return Decision(pool[0], [], matching, others)
    return Decision(None, pool, matching, others)


def _difference(theirs: dict[str, str], mine: dict[str, str]) -> str:
    keys = sorted(k for k in theirs.keys() | mine.keys() if theirs.get(k) != mine.get(k))
    shown = [f"{k}: {theirs.get(k, 'not given')} (this start: {mine.get(k, 'not given')})" for k in keys]
    return "; ".join(shown[:3]) + (f"; {len(shown) - 3} more" if len(shown) > 3 else "") or "same overrides"


def several_runs_message(how: str, task_name: str, matches: list[Match]) -> str:
    runs = ", ".join(f"{m.run} (step {m.step})" for m in matches)
    return (
        f"{how}: {len(matches)} earlier runs of task '{task_name}' were started with these overrides: {runs}; "
        f"continue one with hydra.run.dir=<its directory> (or give ckpt_path=<its checkpoint file>), or start a "
        f"new run without {how}"
    )


def others_note(others: list[str]) -> str:
    if not others:
        return ""
    shown = ", ".join(others[:3]) + (f", and {len(others) - 3} more" if len(others) > 3 else "")
    return f" (runs of other overrides, left alone: {shown})"


def finished(run: Path, checkpoint: Path, step: int, cfg: DictConfig) -> str | None:
    """Why the run that holds `checkpoint` (its newest usable one, at `step`) is finished for this start, or None."""
    max_steps = OmegaConf.select(cfg, "trainer.max_steps", default=None)
    result = run / "result.json"
    wrote_result = result.is_file() and result.stat().st_mtime_ns >= checkpoint.stat().st_mtime_ns
    if isinstance(max_steps, int) and max_steps > 0:
        if step < max_steps:
            return None
        if wrote_result:
            return f"trained to trainer.max_steps={max_steps} and wrote result.json"
        if not cfg.get("optimized_metric"):
            return f"trained to trainer.max_steps={max_steps}; optimized_metric=null: no result to write"
        return None  # stopped after its last step, before its result: the resume validates, tests and writes it
    return "wrote result.json after its last checkpoint" if wrote_result else None


def recorded_value(run: Path, metric: str | None) -> float | None:
    try:
        record = json.loads((run / "result.json").read_text())
    except (OSError, ValueError):
        return None
    return record.get("value") if metric and record.get("metric") == metric else None
