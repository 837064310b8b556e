"""Preemption and Ctrl-C are visible: after SIGTERM or SIGINT train.py writes its checkpoint, says in one line where
it is and how to resume, and exits 143 (128 + SIGTERM) or 130 (128 + SIGINT), not 0 or 1."""

from __future__ import annotations

import csv
import os
import shlex
import signal
import subprocess
import sys
import time

import pytest
import torch

from conftest import ROOT, assert_ok, run_script

pytestmark = pytest.mark.slow


def trained_steps(run_dir) -> int:
    metrics = run_dir / "csv" / "metrics.csv"
    if not metrics.is_file():
        return 0
    rows = list(csv.DictReader(metrics.read_text().splitlines()))
    return max((int(r["step"]) + 1 for r in rows if r.get("train/loss")), default=0)


@pytest.mark.parametrize(
    "sent, by, status", [(signal.SIGTERM, "SIGTERM", 143), (signal.SIGINT, "Ctrl-C", 130)], ids=["sigterm", "ctrl-c"]
)
def test_a_signal_exits_with_its_status_after_the_checkpoint(tmp_path, sent, by, status):
    run_dir = tmp_path / "run"
    process = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "train.py"),
            "trainer.max_steps=100000",
            "trainer.val_check_interval=100000",
            "trainer.log_every_n_steps=1",
            "+logger.csv.flush_logs_every_n_steps=1",  # metrics.csv shows when training has started
            "callbacks.progress_bar=null",
            "trainer.num_sanity_val_steps=0",
            "validate=false",
            "test=false",
            "optimized_metric=null",
            f"hydra.run.dir={run_dir}",
        ],
        env={**os.environ, "HYDRA_FULL_ERROR": "0"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 180
    while trained_steps(run_dir) < 3 and time.time() < deadline and process.poll() is None:
        time.sleep(0.5)  # (not a timing assertion: it waits until training has really started)
    assert process.poll() is None, process.stderr.read()[-3000:]
    process.send_signal(sent)
    stderr = process.communicate(timeout=180)[1]

    assert process.returncode == status, stderr[-3000:]
    saved = run_dir / "checkpoints" / "on_exception.ckpt"
    checkpoint = torch.load(saved, weights_only=True)
    step = checkpoint["global_step"]
    assert step >= 3 and "optimizer_states" in checkpoint
    said = [line for line in stderr.splitlines() if line.startswith("stopped by")]
    assert len(said) == 1, stderr[-3000:]
    assert said[0].startswith(f"stopped by {by} at step {step}; checkpoint: {saved}; resume with: python train.py ")
    assert "Traceback" not in stderr

    # The command it printed resumes this run in place (only the step budget changed, to end the test quickly).
    resume = shlex.split(said[0].split("resume with: ", 1)[1])
    assert resume[:2] == ["python", "train.py"]
    overrides = [a for a in resume[2:] if not a.startswith("trainer.max_steps=")] + [f"trainer.max_steps={step + 2}"]
    assert f"ckpt_path={saved}" in overrides and f"hydra.run.dir={run_dir}" in overrides
    assert_ok(run_script("train.py", *overrides))
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == step + 2
