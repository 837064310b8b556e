"""auto_resume / ckpt_path=last continue this start's own run (issue 44): the run of the task started with the same
overrides, never another job's of a job array; a finished run is left as it is; several or no runs of these
overrides are told in one line with what to pass. And a directory given as a checkpoint names the files in it."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from zoo.checkpointing.reading import check_checkpoint_file, load_model_from_checkpoint
from zoo.entry.resolvers import resolve_ckpt_path, run_dir
from zoo.entry.resume import LAUNCHER_FILE, record_launcher

from conftest import QUIET_SHORT_RUN, assert_ok, assert_one_line_error, run_script

# Every test reads runs that train.py wrote (the module's fixture runs it twice).
pytestmark = pytest.mark.slow

# optimized_metric=train/loss: result.json without a validation pass
FAST = [*QUIET_SHORT_RUN, "trainer.log_every_n_steps=1", "optimized_metric=train/loss", "task_name=array"]
EARLY, DONE = "model.optimizer.lr=0.002", "model.optimizer.lr=0.001"


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def step_of(path: Path) -> int:
    return torch.load(path, weights_only=True, mmap=True)["global_step"]


@pytest.fixture(scope="module")
def job_array(tmp_path_factory) -> Path:
    """Two jobs of one task with different learning rates: the lr=0.002 one stopped at an early step (2 of the 4
    it is resumed to), the lr=0.001 one finished, started later, so its checkpoint is the task's newest (the one
    a resume took before). Tests copy the logs folder before changing anything."""
    logs = tmp_path_factory.mktemp("array") / "logs"
    assert_ok(run_script("train.py", *FAST, EARLY, "trainer.max_steps=2", f"paths.log_dir={logs}"))
    assert_ok(run_script("train.py", *FAST, DONE, "trainer.max_steps=4", f"paths.log_dir={logs}"))
    return logs


def runs_of(logs: Path) -> dict[str, Path]:
    """The run directories of the task, by the learning rate they were started with."""
    runs = {}
    for run in sorted((logs / "array" / "runs").iterdir()):
        overrides = OmegaConf.load(run / ".hydra" / "overrides.yaml")
        (lr,) = [o for o in overrides if o.startswith("model.optimizer.lr=")]
        runs[lr] = run
    return runs


@pytest.fixture
def logs(job_array, tmp_path) -> Path:
    copy = tmp_path / "logs"
    shutil.copytree(job_array, copy)  # copy2: the files keep their times, which tell a finished run
    return copy


def test_auto_resume_continues_its_own_run_and_leaves_the_other_jobs_run_alone(logs):
    runs = runs_of(logs)
    early, done = runs[EARLY], runs[DONE]
    assert step_of(done / "checkpoints" / "last.ckpt") == 4 and step_of(early / "checkpoints" / "last.ckpt") == 2
    assert (done / "checkpoints" / "last.ckpt").stat().st_mtime > (early / "checkpoints" / "last.ckpt").stat().st_mtime
    untouched = snapshot(done)

    result = run_script("train.py", *FAST, EARLY, "trainer.max_steps=4", f"paths.log_dir={logs}", "auto_resume=true")
    assert_ok(result)
    assert f"checkpoint chosen: {early / 'checkpoints' / 'last.ckpt'} (step 2)" in result.stdout + result.stderr
    checkpoint = torch.load(early / "checkpoints" / "last.ckpt", weights_only=True)
    assert checkpoint["global_step"] == 4 and checkpoint["hyper_parameters"]["optimizer"]["lr"] == 0.002
    record = json.loads((early / "result.json").read_text())
    assert EARLY in record["overrides"] and DONE not in record["overrides"]
    assert snapshot(done) == untouched, "the other job's run was changed"
    assert sorted((logs / "array" / "runs").iterdir()) == sorted(runs.values())  # no third directory

    # The same start again: its run is now finished at step 4; nothing starts, nothing changes, exit 0.
    resumed = snapshot(early)
    again = run_script("train.py", *FAST, EARLY, "trainer.max_steps=4", f"paths.log_dir={logs}", "auto_resume=true")
    assert_ok(again)
    said = [line for line in (again.stdout + again.stderr).splitlines() if "is finished" in line]
    assert len(said) == 1 and f"auto_resume: run {early} is finished at step 4" in said[0], again.stdout[-3000:]
    assert "raise trainer.max_steps above 4" in said[0] and "Restored all states" not in again.stdout + again.stderr
    assert snapshot(early) == resumed and snapshot(done) == untouched


def test_a_finished_run_is_never_resumed_into_a_second_result(logs):
    done = runs_of(logs)[DONE]
    before = snapshot(logs)
    # The finished job's own command again, as a requeued array would start it: one line, exit 0, nothing written.
    finished = run_script("train.py", *FAST, DONE, "trainer.max_steps=4", f"paths.log_dir={logs}", "auto_resume=true")
    assert_ok(finished)
    assert f"auto_resume: run {done} is finished at step 4 (trained to trainer.max_steps=4 and wrote result.json)" in (
        finished.stdout + finished.stderr
    )
    assert snapshot(logs) == before
    # ckpt_path=last asks to continue it: refused in one line, nothing written.
    refused = run_script("train.py", *FAST, DONE, "trainer.max_steps=4", f"paths.log_dir={logs}", "ckpt_path=last")
    assert_one_line_error(refused, f"ckpt_path=last: run {done} is finished at step 4", "raise trainer.max_steps")
    assert snapshot(logs) == before


def test_several_runs_of_the_same_overrides_are_refused_naming_them(logs):
    early = runs_of(logs)[EARLY]
    twin = early.with_name(early.name + "-1")
    shutil.copytree(early, twin)  # the same command started twice, both stopped at step 2
    before = snapshot(logs)
    result = run_script("train.py", *FAST, EARLY, "trainer.max_steps=4", f"paths.log_dir={logs}", "auto_resume=true")
    assert_one_line_error(
        result,
        "auto_resume: 2 earlier runs of task 'array' were started with these overrides: ",
        f"{early} (step 2), {twin} (step 2)",
        "continue one with hydra.run.dir=<its directory>",
    )
    assert snapshot(logs) == before and len(list((logs / "array" / "runs").iterdir())) == 3  # no new directory


def _cfg(logs: Path, output_dir: Path, **top) -> OmegaConf:
    return OmegaConf.create(
        {
            "task_name": "array",
            "ckpt_path": None,
            "auto_resume": False,
            "optimized_metric": "train/loss",
            "trainer": {"max_steps": 4},
            "paths": {"log_dir": str(logs), "output_dir": str(output_dir)},
            **top,
        }
    )


def test_no_run_of_these_overrides_is_said_with_the_runs_left_alone(logs, caplog):
    runs = runs_of(logs)
    overrides = [*FAST, "model.optimizer.lr=0.005", "trainer.max_steps=4", f"paths.log_dir={logs}"]
    root = str(logs / "array" / "runs")
    fresh = Path(run_dir(root, "fresh", "last", False, overrides))
    assert fresh == logs / "array" / "runs" / "fresh"  # no other lr's run is taken
    with pytest.raises(ValueError) as refused:
        resolve_ckpt_path(_cfg(logs, fresh, ckpt_path="last"), overrides)
    message = str(refused.value)
    assert "\n" not in message and "ckpt_path=last: no earlier run of task 'array'" in message
    assert f"{runs[DONE]} (model.optimizer.lr: 0.001 (this start: 0.005))" in message
    assert f"{runs[EARLY]} (model.optimizer.lr: 0.002 (this start: 0.005); trainer.max_steps: 2" in message
    assert "give ckpt_path=<a checkpoint file> or hydra.run.dir=<a run directory>" in message
    # auto_resume: a fresh start, saying which runs it left alone
    caplog.set_level(logging.INFO)
    assert resolve_ckpt_path(_cfg(logs, fresh, auto_resume=True), overrides) is None
    said = [r.getMessage() for r in caplog.records if "auto_resume: no earlier run" in r.getMessage()]
    assert len(said) == 1 and "training from the start in" in said[0] and str(runs[DONE]) in said[0]


def test_the_same_slurm_job_tells_its_run_among_runs_of_the_same_overrides(logs, monkeypatch):
    early = runs_of(logs)[EARLY]
    twin = early.with_name(early.name + "-1")
    shutil.copytree(early, twin)
    overrides = list(OmegaConf.load(early / ".hydra" / "overrides.yaml"))
    root = str(logs / "array" / "runs")
    for name in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"):
        monkeypatch.delenv(name, raising=False)
    assert run_dir(root, "fresh", None, True, overrides) == f"{root}/fresh"  # two runs fit: none is guessed
    monkeypatch.setenv("SLURM_JOB_ID", "7001")
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "7000")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "1")
    record_launcher(twin / ".hydra")  # what the twin's start recorded (zoo.entry.train.start_run)
    assert json.loads((twin / ".hydra" / LAUNCHER_FILE).read_text())["SLURM_ARRAY_TASK_ID"] == "1"
    assert run_dir(root, "fresh-2", None, True, overrides) == str(twin)  # the requeued job: same SLURM job id
    monkeypatch.setenv("SLURM_JOB_ID", "8001")  # another job of another array
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "8000")
    assert run_dir(root, "fresh-3", None, True, overrides) == f"{root}/fresh-3"


def test_a_directory_given_as_a_checkpoint_names_the_checkpoint_files_in_it(job_array, tmp_path):
    run = runs_of(job_array)[DONE]
    files = sorted((run / "checkpoints").glob("*.ckpt"))
    for directory in (run, run / "checkpoints"):
        for read in (check_checkpoint_file, load_model_from_checkpoint):  # train.py, zoo-export / eval.py, generate
            with pytest.raises(ValueError) as refused:
                read(directory)
            message = str(refused.value)
            assert message.startswith(f"{directory.resolve()} is a directory, not a checkpoint file; check ")
            assert "give one of the checkpoint files in it: " in message and "\n" not in message
            named = message.split("give one of the checkpoint files in it: ")[1]
            assert named.startswith(str((run / "checkpoints" / "last.ckpt").resolve()))  # last.ckpt first
            assert all(str(f.resolve()) in named for f in files) and files
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="is a directory, not a checkpoint file; check ckpt_path: it holds no .ckpt"):
        check_checkpoint_file(empty)


def test_eval_with_a_run_directory_as_ckpt_path_is_one_line(job_array):
    run = runs_of(job_array)[DONE]
    result = run_script("eval.py", f"ckpt_path={run}")
    named = str((run / "checkpoints" / "last.ckpt").resolve())
    assert_one_line_error(result, f"{run.resolve()} is a directory, not a checkpoint file", named)
