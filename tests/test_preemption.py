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
