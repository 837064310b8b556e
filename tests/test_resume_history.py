"""Resuming in place keeps the run's history (issue 16, item 3): metrics.csv gains the resumed steps instead of being
replaced, the first start's configs stay as they were, and a start that fails changes nothing in the directory. The
resumed run is train.py's, shared with tests/test_logging_resume.py (tests/trained.py)."""

from __future__ import annotations

import csv

import pytest
from trained import copy_run, snapshot, train_refused

from conftest import assert_ok, run_script

FIRST_STEPS, RESUMED_STEPS = 6, 12  # the session's resumed run (tests/trained.py, resumed_run)


def logged_train_steps(metrics_csv: bytes) -> list[int]:
    rows = list(csv.DictReader(metrics_csv.decode().splitlines()))
    return sorted(int(r["step"]) for r in rows if r.get("train/loss"))


@pytest.fixture(scope="module")
def resumed(resumed_run):
    """6 steps, then `ckpt_path=last` to 12 (the run directory found by zoo.run_dir, continued in place): the run
    directory, what it held before the resume, the overrides of both starts and the task name. train.py run twice
    (tests/trained.py, shared with tests/test_logging_resume.py). Read only: tests copy it to start it again."""
    return resumed_run


@pytest.mark.slow
def test_resume_appends_to_metrics_csv(resumed):
    run, before = resumed.run, resumed.before
    first_half = logged_train_steps(before["csv/metrics.csv"])
    assert first_half == list(range(FIRST_STEPS))
    # Every step of both starts, each once: Lightning's CSV logger deleted steps 0-5 at the resume.
    assert logged_train_steps((run / "csv" / "metrics.csv").read_bytes()) == list(range(RESUMED_STEPS))


@pytest.mark.slow
def test_resume_keeps_the_first_start_configs(resumed):
    run, before = resumed.run, resumed.before
    for name in (".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml", "config_resolved.yaml"):
        assert before[name] is not None, name
        assert (run / name).read_bytes() == before[name], f"{name} was rewritten by the resumed start"
    # The resumed start's own configs beside them, with its overrides.
    (resumed_configs,) = (run / ".hydra").glob("resume-*")
    assert f"trainer.max_steps={RESUMED_STEPS}" in (resumed_configs / "overrides.yaml").read_text()
    assert f"max_steps: {RESUMED_STEPS}" in (resumed_configs / "config_resolved.yaml").read_text()
    assert f"trainer.max_steps={RESUMED_STEPS}" not in (run / ".hydra" / "overrides.yaml").read_text()
    # The log file holds both starts.
    log = (run / f"{resumed.task_name}.log").read_text()
    assert log.count("Trainer.fit` stopped") == 2


@pytest.mark.slow  # the run it copies is made by train.py
@pytest.mark.parametrize(
    "bad",
    [
        ["seed=abc"],  # a value refused by the config checks
        ["data=text_files", "data.text_files=[/nonexistent/input.txt]"],  # missing data, found when it is built
    ],
    ids=["bad-value", "missing-data"],
)
def test_failed_resume_changes_nothing(resumed, bad, tmp_path):
    run = copy_run(resumed.run, tmp_path / "run")
    before = snapshot(run)
    # hydra.run.dir: the start targets this run although its overrides differ (ckpt_path=last alone would continue
    # only a run of its own overrides: zoo.entry.resume), so it is the run's own directory that must stay as it was.
    train_refused(*resumed.common, "trainer.max_steps=14", "ckpt_path=last", f"hydra.run.dir={run}", *bad)
    assert snapshot(run) == before


@pytest.mark.slow
def test_new_run_in_an_existing_directory_says_it_resumes(resumed, tmp_path):
    """hydra.run.dir=<an earlier run> without ckpt_path continues it, and says so in one line (train.py's output)."""
    run = copy_run(resumed.run, tmp_path / "run")
    steps = RESUMED_STEPS + 3  # to the next validation (trainer.val_check_interval=3), which logs val/loss
    result = run_script("train.py", *resumed.common, f"trainer.max_steps={steps}", f"hydra.run.dir={run}")
    assert_ok(result)
    said = [line for line in result.stdout.splitlines() if "because hydra.run.dir already holds a checkpoint" in line]
    assert len(said) == 1, result.stdout[-3000:]
    assert str(run / "checkpoints") in said[0] and "a new directory to start fresh" in said[0]
    assert logged_train_steps((run / "csv" / "metrics.csv").read_bytes()) == list(range(steps))


def test_csv_logger_continues_and_replaces_the_steps_a_resume_redoes(tmp_path):
    """The logger alone: a second logger on the same folder keeps the rows before its first step and rewrites the
    ones it logs again (a start that logged past its checkpoint), with a column the first start never had."""
    from zoo.entry.builders import CSVLogger

    first = CSVLogger(tmp_path, name="csv", version="")
    for step in range(6):
        first.log_metrics({"train/loss": 10.0 - step}, step=step)
    first.save()
    second = CSVLogger(tmp_path, name="csv", version="")
    for step in range(4, 8):
        second.log_metrics({"train/loss": 1.0 * step, "val/loss": 0.5}, step=step)
    second.save()
    rows = list(csv.DictReader((tmp_path / "csv" / "metrics.csv").read_text().splitlines()))
    assert [int(r["step"]) for r in rows] == list(range(8))
    assert [float(r["train/loss"]) for r in rows] == [10.0, 9.0, 8.0, 7.0, 4.0, 5.0, 6.0, 7.0]
    assert [r["val/loss"] for r in rows[:4]] == ["", "", "", ""] and rows[-1]["val/loss"] == "0.5"
