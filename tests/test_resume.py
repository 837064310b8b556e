"""Resume is exact: N steps, stop, resume to 2N gives the losses of an uninterrupted 2N-step run."""

from __future__ import annotations

import csv

import pytest

from conftest import run_script

pytestmark = pytest.mark.slow

COMMON = ["trainer.deterministic=true", "trainer.log_every_n_steps=1", "trainer.val_check_interval=100000",
          "validate=false", "test=false", "model.net.dropout=0.1", "model.num_samples=0", "seed=7", "optimized_metric=null"]


def step_losses(run_dir) -> dict[int, str]:
    rows = csv.DictReader(open(run_dir / "csv" / "metrics.csv"))
    return {int(r["step"]): r["train/loss"] for r in rows if r.get("train/loss")}


def test_resumed_run_equals_uninterrupted_run(tmp_path):
    full, first, second = tmp_path / "full", tmp_path / "first", tmp_path / "second"
    for args in (
        ["trainer.max_steps=16", "model.scheduler.max_steps=16", f"hydra.run.dir={full}"],
        ["trainer.max_steps=8", "model.scheduler.max_steps=16", f"hydra.run.dir={first}"],
        ["trainer.max_steps=16", "model.scheduler.max_steps=16", f"hydra.run.dir={second}",
         f"ckpt_path={first / 'checkpoints' / 'last.ckpt'}"],
    ):
        result = run_script("train.py", *COMMON, *args)
        assert result.returncode == 0, result.stderr[-3000:]
    uninterrupted, resumed = step_losses(full), step_losses(second)
    assert sorted(resumed) == list(range(8, 16))  # Lightning logs step s after s+1 optimizer steps -> 8..15
    assert {s: uninterrupted[s] for s in resumed} == resumed  # bit-identical, dropout included
    assert step_losses(first) == {s: uninterrupted[s] for s in range(8)}
