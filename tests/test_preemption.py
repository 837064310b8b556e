"""SIGTERM (how clusters preempt a job) during training leaves a checkpoint that loads and resumes."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from conftest import ROOT, run_script

pytestmark = pytest.mark.slow


def logged_steps(run_dir) -> int:
    metrics = run_dir / "csv" / "metrics.csv"
    if not metrics.is_file():
        return 0
    rows = list(csv.DictReader(metrics.read_text().splitlines()))
    return max((int(r["step"]) for r in rows if r.get("train/loss")), default=0)


def test_sigterm_saves_a_resumable_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    process = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "train.py"),
            "trainer.max_steps=100000",
            "trainer.val_check_interval=100000",
            "trainer.log_every_n_steps=5",
            "callbacks.progress_bar=null",
            f"hydra.run.dir={run_dir}",
        ],
        env=dict(os.environ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while logged_steps(run_dir) < 10 and time.time() < deadline and process.poll() is None:
        time.sleep(0.5)  # (not a timing assertion: it waits until training has really started)
    assert process.poll() is None, process.stderr.read()[-3000:]
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=120)

    saved = run_dir / "checkpoints" / "on_exception.ckpt"
    assert saved.is_file(), "no checkpoint written on SIGTERM"
    checkpoint = torch.load(saved, weights_only=True)
    step = checkpoint["global_step"]
    assert step >= 10 and "optimizer_states" in checkpoint

    resumed_dir = tmp_path / "resumed"
    result = run_script(
        "train.py", f"ckpt_path={saved}", f"trainer.max_steps={step + 5}", "test=false", f"hydra.run.dir={resumed_dir}"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert torch.load(resumed_dir / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == step + 5


def test_slurm_notice_checkpoints_the_current_step_requeues_once_and_the_requeued_job_resumes_it(tmp_path):
    """What a SLURM job sees before its time limit, simulated: the SLURM variables, the signal submitit asks for
    (SIGUSR2), and a stand-in `scontrol` on PATH that records its calls."""
    run_dir, bin_dir, calls = tmp_path / "job", tmp_path / "bin", tmp_path / "scontrol-calls"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> "{calls}"\n')
    (bin_dir / "scontrol").chmod(0o755)
    slurm = {
        "SLURM_JOB_ID": "4242",
        "SLURM_NTASKS": "1",
        "SLURM_JOB_NAME": "train",
        "SLURM_NODELIST": "localhost",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
    }
    env = {**os.environ, **slurm, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "HYDRA_FULL_ERROR": "0"}
    command = [
        sys.executable,
        str(ROOT / "train.py"),
        "trainer.val_check_interval=100000",
        "trainer.log_every_n_steps=5",
        "callbacks.progress_bar=null",
        "test=false",
        "validate=false",
        "optimized_metric=null",
        f"hydra.run.dir={run_dir}",  # the job directory the launcher gives it, the same after the requeue
    ]
    process = subprocess.Popen(
        [*command, "trainer.max_steps=100000"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    deadline = time.time() + 120
    while logged_steps(run_dir) < 10 and time.time() < deadline and process.poll() is None:
        time.sleep(0.5)  # (not a timing assertion: it waits until training has really started)
    assert process.poll() is None, process.stderr.read()[-3000:]
    process.send_signal(signal.SIGUSR2)
    stderr = process.communicate(timeout=120)[1]

    assert process.returncode == 143, stderr[-3000:]
    saved = run_dir / "checkpoints" / "on_exception.ckpt"
    step = torch.load(saved, weights_only=True)["global_step"]
    assert step >= 10 and step >= logged_steps(run_dir)  # the step it was at, not the last periodic save
    assert calls.read_text().splitlines() == ["requeue 4242"]  # once
    assert "SLURM job 4242 requeued" in stderr and "Traceback" not in stderr
    assert f"stopped by SIGUSR2 at step {step}; checkpoint: {saved}" in stderr

    # The requeued job: the same command in the same directory continues from the checkpoint written at the signal.
    requeued = subprocess.run(
        [*command, f"trainer.max_steps={step + 3}"], env=env, capture_output=True, text=True, timeout=300
    )
    assert requeued.returncode == 0, requeued.stderr[-3000:]
    assert f"checkpoint chosen: {saved} (step {step})" in requeued.stdout + requeued.stderr
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == step + 3
    assert calls.read_text().splitlines() == ["requeue 4242"]
