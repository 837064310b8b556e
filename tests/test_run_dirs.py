"""One run, one directory, one writer; and a start that is refused leaves no trace.

- Runs started in the same second each get their own directory, with their own config, result and checkpoint;
  so do sweeps (`train.py -m`), whose jobs follow their sweep's directory into launcher worker processes.
- A run directory in use by a running process is refused to a second one.
- A resume that does not fit the checkpoint (another optimizer, another model size) is refused in one line before
  anything is written: the earlier run's directory stays byte-identical, no checkpoint appears for the next resume
  to take, and the next `auto_resume` continues from the last good checkpoint.

Concurrent starts, a directory held by another process and sweeps are processes; the resumes run the train entry in
this process (tests/trained.py), on copies of runs trained once for the module.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from trained import snapshot, train_in_process, train_refused

from zoo.entry.run_lock import fresh_run_dir, lock_run_dir, unlock_run_dir

from conftest import QUIET_SHORT_RUN, ROOT, assert_one_line_error, run_script

# optimized_metric=train/loss: result.json without a validation pass
FAST = [*QUIET_SHORT_RUN, "trainer.log_every_n_steps=1", "optimized_metric=train/loss"]
MUON = "model.optimizer._target_=zoo.optim.muon.MuonWithAdamW"


def _claim(root, name, start, queue):
    start.wait()
    queue.put(fresh_run_dir(root, name))


def test_processes_claiming_the_same_second_get_distinct_directories(tmp_path):
    root = str(tmp_path / "runs")
    context = multiprocessing.get_context("fork")
    start, queue = context.Event(), context.Queue()
    processes = [context.Process(target=_claim, args=(root, "2026-01-01_00-00-00", start, queue)) for _ in range(8)]
    for process in processes:
        process.start()
    start.set()  # all claim at once
    claimed = [queue.get(timeout=60) for _ in processes]
    for process in processes:
        process.join(timeout=60)
    assert len(set(claimed)) == 8, claimed
    assert sorted(p.name for p in Path(root).iterdir()) == sorted(Path(c).name for c in claimed)
    assert "2026-01-01_00-00-00" in {Path(c).name for c in claimed}


def test_a_config_resolved_twice_in_one_process_keeps_its_directory(tmp_path):
    first = fresh_run_dir(str(tmp_path), "same-second")
    assert fresh_run_dir(str(tmp_path), "same-second") == first and len(list(tmp_path.iterdir())) == 1


def test_the_processes_of_one_launched_job_share_its_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "abc123")
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    # Each node composes its own ${now}; the job id names the directory whatever the second.
    assert fresh_run_dir(str(tmp_path), "12-00-00") == fresh_run_dir(str(tmp_path), "12-00-01")
    assert fresh_run_dir(str(tmp_path), "12-00-00").endswith("/torchrun-abc123")


@pytest.mark.slow
def test_two_runs_started_together_keep_their_own_config_result_and_checkpoint(tmp_path):
    logs = tmp_path / "logs"
    processes = {
        lr: subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "train.py"),
                *FAST,
                "trainer.max_steps=3",
                f"model.optimizer.lr={lr}",
                f"paths.log_dir={logs}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for lr in ("0.001", "0.003")
    }
    for process in processes.values():
        _, stderr = process.communicate(timeout=600)
        assert process.returncode == 0, stderr[-3000:]
    runs = sorted((logs / "train" / "runs").iterdir())
    assert len(runs) == 2, runs
    seen = set()
    for run in runs:
        overrides = (run / ".hydra" / "overrides.yaml").read_text()
        (lr,) = [lr for lr in processes if f"model.optimizer.lr={lr}" in overrides]
        seen.add(lr)
        assert f"lr: {lr}" in (run / "config_resolved.yaml").read_text()
        assert json.loads((run / "result.json").read_text())["overrides"] == [
            *FAST,
            "trainer.max_steps=3",
            f"model.optimizer.lr={lr}",
            f"paths.log_dir={logs}",
        ]
        checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
        assert checkpoint["global_step"] == 3 and checkpoint["hyper_parameters"]["optimizer"]["lr"] == float(lr)
    assert seen == set(processes)


@pytest.mark.slow
def test_two_sweeps_started_together_keep_their_own_jobs(tmp_path):
    """Two `train.py -m` started at once, one running its jobs in this process, one in joblib workers. The
    directories named after the next two minutes' seconds are taken beforehand, so each sweep must claim a
    `<second>-N` name, and every job (also in a worker process) must follow its sweep there."""
    from datetime import datetime, timedelta

    multiruns = tmp_path / "logs" / "train" / "multiruns"
    multiruns.mkdir(parents=True)
    now = datetime.now()
    taken = [(now + timedelta(seconds=s)).strftime("%Y-%m-%d_%H-%M-%S") for s in range(-2, 120)]
    for name in taken:
        (multiruns / name).mkdir()
    sweeps = {
        "basic": ["seed=1,2"],
        "parallel": ["hydra/launcher=parallel", "seed=3,4"],
    }
    env = {**os.environ, "HYDRA_FULL_ERROR": "0"}
    processes = {
        name: subprocess.Popen(
            [sys.executable, str(ROOT / "train.py"), "-m", *extra, *FAST, "trainer.max_steps=2", "logger=none"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, extra in sweeps.items()
    }
    for process in processes.values():
        _, stderr = process.communicate(timeout=900)
        assert process.returncode == 0, stderr[-3000:]
    claimed = sorted(p for p in multiruns.iterdir() if p.name not in taken)
    assert len(claimed) == 2 and all("-" in p.name.rsplit("_", 1)[1][8:] for p in claimed), claimed
    assert all(not any((multiruns / name).iterdir()) for name in taken), "a job wrote into a directory it did not claim"
    seeds_by_sweep = set()
    for sweep in claimed:
        jobs = sorted(p for p in sweep.iterdir() if p.is_dir() and p.name.isdigit())
        assert [j.name for j in jobs] == ["0", "1"], sweep
        seeds = tuple(json.loads((j / "result.json").read_text())["overrides"][0] for j in jobs)
        seeds_by_sweep.add(seeds)
    assert seeds_by_sweep == {("seed=1", "seed=2"), ("seed=3", "seed=4")}


@pytest.mark.slow
def test_a_run_directory_in_use_is_refused(tmp_path):
    run = tmp_path / "run"
    lock_run_dir(run)  # this process stands for a run still training there
    try:
        result = run_script("train.py", *FAST, "trainer.max_steps=2", f"hydra.run.dir={run}")
        assert_one_line_error(result, f"run directory {run} is in use by another running process")
        assert list(run.iterdir()) == []
    finally:
        unlock_run_dir(run)


@pytest.fixture(scope="module")
def adamw_and_muon_runs(tmp_path_factory):
    """A 4-step run with AdamW and one with Muon, each in its own log folder. Read only: tests copy the folder."""
    runs = {}
    for name, extra in (("adamw", []), ("muon", [MUON])):
        logs = tmp_path_factory.mktemp(name) / "logs"
        train_in_process(*FAST, *extra, "trainer.max_steps=4", f"paths.log_dir={logs}", cwd=logs.parent)
        (run,) = (logs / "train" / "runs").iterdir()
        runs[name] = (logs, run)
    return runs


def copied_runs(runs, name, tmp_path) -> tuple[Path, Path]:
    """A copy of one of the module's log folders, and its run."""
    logs, run = runs[name]
    shutil.copytree(logs, tmp_path / "logs")
    return tmp_path / "logs", tmp_path / "logs" / run.relative_to(logs)


@pytest.mark.parametrize(
    "trained, resumed_with", [("adamw", [MUON]), ("muon", [])], ids=["adamw-to-muon", "muon-to-adamw"]
)
def test_a_resume_with_another_optimizer_is_refused_and_changes_nothing(
    adamw_and_muon_runs, trained, resumed_with, tmp_path
):
    logs, run = copied_runs(adamw_and_muon_runs, trained, tmp_path)
    extra = [MUON] if trained == "muon" else []
    before = snapshot(logs)
    # Pointed at the run (its directory, or its checkpoint): the checkpoint's optimizer state does not fit.
    for how in ([f"hydra.run.dir={run}", "auto_resume=true"], [f"hydra.run.dir={run}", "ckpt_path=last"]):
        result = train_refused(*FAST, *resumed_with, "trainer.max_steps=8", f"paths.log_dir={logs}", *how)
        assert "optimizer, but this run configures" in result.line and "model.optimizer._target_=" in result.line
        assert snapshot(logs) == before, "a refused resume changed the earlier run's directory"
    # ckpt_path=last with the other optimizer is another configuration's start: the run is not its own to continue.
    result = train_refused(*FAST, *resumed_with, "trainer.max_steps=8", f"paths.log_dir={logs}", "ckpt_path=last")
    assert "no earlier run of task 'train'" in result.line and f"{run} (model.optimizer._target_: " in result.line
    assert snapshot(logs) == before
    # The next resume with the run's own optimizer continues from its last good checkpoint, in place.
    train_in_process(*FAST, *extra, "trainer.max_steps=6", f"paths.log_dir={logs}", "auto_resume=true")
    assert [p.name for p in (logs / "train" / "runs").iterdir()] == [run.name]
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert checkpoint["global_step"] == 6 and not (run / "checkpoints" / "on_exception.ckpt").exists()


def test_a_resume_of_another_model_size_changes_nothing(adamw_and_muon_runs, tmp_path):
    logs, run = copied_runs(adamw_and_muon_runs, "adamw", tmp_path)
    before = snapshot(logs)
    result = train_refused(
        *FAST, "model.net.n_layer=1", f"paths.log_dir={logs}", f"hydra.run.dir={run}", "ckpt_path=last"
    )
    assert "holds a gpt model with n_layer=" in result.line
    assert snapshot(logs) == before


def test_ckpt_path_last_with_nothing_to_resume_leaves_no_directory(tmp_path):
    logs = tmp_path / "logs"
    result = train_refused(*FAST, f"paths.log_dir={logs}", "ckpt_path=last")
    assert "ckpt_path=last: no earlier run" in result.line
    runs = logs / "train" / "runs"
    assert not runs.exists() or list(runs.iterdir()) == []


@pytest.mark.slow
def test_under_torchrun_without_a_job_id_every_rank_takes_the_directory_rank_zero_claimed(tmp_path):
    """The ranks of a torchrun job (static rendezvous: no run id) join the agent's store, a TCPStore at
    MASTER_ADDR:MASTER_PORT, stood up here by the test; each composes another second, all get rank 0's claim."""
    from datetime import timedelta

    from torch.distributed import TCPStore

    store = TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=60))
    runs_root = tmp_path / "runs"
    code = "import sys; from zoo.entry.run_lock import fresh_run_dir; print(fresh_run_dir(sys.argv[1], sys.argv[2]))"
    ranks = []
    for rank, second in ((1, "12-00-05"), (0, "12-00-03")):  # rank 1 asks first: it waits for rank 0
        env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "TORCHELASTIC_USE_AGENT_STORE": "True",
            "TORCHELASTIC_RUN_ID": "none",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(store.port),
        }
        env.pop("SLURM_JOB_ID", None)
        command = [sys.executable, "-c", code, str(runs_root), second]
        ranks.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = [rank.communicate(timeout=120) for rank in ranks]
    assert all(rank.returncode == 0 for rank in ranks), [err[-2000:] for _, err in outputs]
    assert outputs[0][0].strip() == outputs[1][0].strip() == str(runs_root / "12-00-03")
