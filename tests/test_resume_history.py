"""Resuming in place keeps the run's history (issue 16, item 3): metrics.csv gains the resumed steps instead of being
replaced, the first start's configs stay as they were, and a start that fails changes nothing in the directory."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from conftest import assert_ok, run_script

pytestmark = pytest.mark.slow

BASE = [
    "trainer.val_check_interval=3",
    "trainer.limit_val_batches=1",
    "trainer.log_every_n_steps=1",
    "validate=false",
    "test=false",
    "model.sample_tokens=20",
    "callbacks.progress_bar=null",
]


def snapshot(directory: Path) -> dict[str, bytes | None]:
    """Every file and folder under `directory` with its bytes (None for a folder)."""
    return {
        str(p.relative_to(directory)): (p.read_bytes() if p.is_file() else None) for p in sorted(directory.rglob("*"))
    }


def logged_train_steps(metrics_csv: bytes) -> list[int]:
    rows = list(csv.DictReader(metrics_csv.decode().splitlines()))
    return sorted(int(r["step"]) for r in rows if r.get("train/loss"))


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    """6 steps, then `ckpt_path=last` to 10 (the run directory found by zoo.run_dir, continued in place); returns the
    run directory and what it held before the resume."""
    logs = tmp_path_factory.mktemp("logs")
    common = [*BASE, f"paths.log_dir={logs}", "task_name=history"]
    assert_ok(run_script("train.py", *common, "trainer.max_steps=6"))
    (run,) = (logs / "history" / "runs").iterdir()
    before = snapshot(run)
    assert_ok(run_script("train.py", *common, "trainer.max_steps=10", "ckpt_path=last"))
    assert list((logs / "history" / "runs").iterdir()) == [run]  # no second directory
    return run, before, common


def test_resume_appends_to_metrics_csv(resumed):
    run, before, _ = resumed
    first_half = logged_train_steps(before["csv/metrics.csv"])
    assert first_half == list(range(6))
    # Every step of both starts, each once: Lightning's CSV logger deleted steps 0-5 at the resume.
    assert logged_train_steps((run / "csv" / "metrics.csv").read_bytes()) == list(range(10))


def test_resume_keeps_the_first_start_configs(resumed):
    run, before, _ = resumed
    for name in (".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml", "config_resolved.yaml"):
        assert before[name] is not None, name
        assert (run / name).read_bytes() == before[name], f"{name} was rewritten by the resumed start"
    # The resumed start's own configs beside them, with its overrides.
    (resumed_configs,) = (run / ".hydra").glob("resume-*")
    assert "trainer.max_steps=10" in (resumed_configs / "overrides.yaml").read_text()
    assert "max_steps: 10" in (resumed_configs / "config_resolved.yaml").read_text()
    assert "trainer.max_steps=10" not in (run / ".hydra" / "overrides.yaml").read_text()
    # The log file holds both starts.
    log = (run / "history.log").read_text()
    assert log.count("Trainer.fit` stopped") == 2


@pytest.mark.parametrize(
    "bad",
    [
        ["seed=abc"],  # a value refused by the config checks
        ["data=text_files", "data.text_files=[/nonexistent/input.txt]"],  # missing data, found when it is built
    ],
    ids=["bad-value", "missing-data"],
)
def test_failed_resume_changes_nothing(resumed, bad):
    run, _, common = resumed
    before = snapshot(run)
    # hydra.run.dir: the start targets this run although its overrides differ (ckpt_path=last alone would continue
    # only a run of its own overrides: zoo.entry.resume), so it is the run's own directory that must stay as it was.
    result = run_script("train.py", *common, "trainer.max_steps=14", "ckpt_path=last", f"hydra.run.dir={run}", *bad)
    assert result.returncode == 1 and "error: " in result.stderr, result.stderr[-3000:]
    assert snapshot(run) == before


def test_new_run_in_an_existing_directory_says_it_resumes(resumed):
    """hydra.run.dir=<an earlier run> without ckpt_path continues it, and says so in one line."""
    run, _, common = resumed
    result = run_script("train.py", *common, "trainer.max_steps=12", f"hydra.run.dir={run}")
    assert_ok(result)
    said = [line for line in result.stdout.splitlines() if "because hydra.run.dir already holds a checkpoint" in line]
    assert len(said) == 1, result.stdout[-3000:]
    assert str(run / "checkpoints") in said[0] and "a new directory to start fresh" in said[0]
    assert logged_train_steps((run / "csv" / "metrics.csv").read_bytes()) == list(range(12))


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
