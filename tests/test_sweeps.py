"""Multirun grids, Optuna searches, multirun + DDP: one directory and one logger run per job, and a summary."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import run_script

pytestmark = pytest.mark.slow

SHORT = [
    "trainer.max_steps=4",
    "trainer.val_check_interval=2",
    "trainer.limit_val_batches=1",
    "test=false",
    "model.num_samples=0",
    "callbacks.progress_bar=null",
]


def job_dirs(sweep_dir):
    return sorted(p for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit())


def test_grid_multirun_has_a_directory_logger_and_result_per_job(tmp_path):
    sweep = tmp_path / "sweep"
    result = run_script(
        "train.py",
        "-m",
        "model.optimizer.lr=0.001,0.003",
        "data.batch_size=8,12",
        *SHORT,
        "logger=many_loggers",
        f"hydra.sweep.dir={sweep}",
        env={"WANDB_MODE": "offline"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = job_dirs(sweep)
    assert [j.name for j in jobs] == ["0", "1", "2", "3"]
    seen, wandb_runs = set(), set()
    for job in jobs:
        assert (job / "csv" / "metrics.csv").is_file() and (job / "checkpoints" / "last.ckpt").is_file()
        assert list((job / "tensorboard").rglob("events.out.tfevents.*"))
        (offline,) = (job / "wandb").glob("offline-run-*")  # exactly one wandb run per job
        wandb_runs.add(offline.name.rsplit("-", 1)[1])
        record = json.loads((job / "result.json").read_text())
        assert record["metric"] == "val/loss" and record["value"] > 0
        seen.add(tuple(sorted(record["overrides"])))
    assert len(seen) == 4  # every combination ran once
    assert len(wandb_runs) == 4  # four separate wandb runs, none merged
    table = (sweep / "summary.md").read_text().splitlines()
    assert "model.optimizer.lr" in table[0] and "data.batch_size" in table[0] and len(table) == 2 + 4
    assert (sweep / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_optuna_search_reports_the_best_trial(tmp_path):
    sweep = tmp_path / "optuna"
    result = run_script(
        "train.py",
        "hparams_search=gpt_optuna",
        "hydra.sweeper.n_trials=3",
        "hydra.sweeper.sampler.n_startup_trials=2",
        *SHORT,
        f"hydra.sweep.dir={sweep}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    values = [json.loads((j / "result.json").read_text())["value"] for j in job_dirs(sweep)]
    assert len(values) == 3
    best = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert best["best_value"] == pytest.approx(min(values))
    assert set(best["best_params"]) == {"model.optimizer.lr", "model.weight_decay", "model.net.dropout"}


def test_sweep_fails_naming_a_metric_that_is_never_logged(tmp_path):
    result = run_script(
        "train.py",
        "-m",
        "model.optimizer.lr=0.001",
        "optimized_metric=val/bleu",
        *SHORT,
        f"hydra.sweep.dir={tmp_path / 's'}",
    )
    assert result.returncode != 0
    assert "optimized_metric 'val/bleu' was never logged" in result.stderr


def test_multirun_with_ddp_keeps_each_job_in_its_directory(tmp_path):
    sweep = tmp_path / "ddp_sweep"
    logs = tmp_path / "logs"
    result = run_script(
        "train.py",
        "-m",
        "trainer=ddp_sim",
        "model.optimizer.lr=0.001,0.003",
        *SHORT,
        f"hydra.sweep.dir={sweep}",
        f"paths.log_dir={logs}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert [j.name for j in job_dirs(sweep)] == ["0", "1"]
    for job in job_dirs(sweep):
        assert (job / "checkpoints" / "last.ckpt").is_file()
    assert not logs.exists()  # no rank wandered off into a run directory of its own


def test_parallel_launcher_runs_jobs_in_separate_processes(tmp_path):
    sweep = tmp_path / "parallel"
    result = run_script(
        "train.py",
        "-m",
        "hydra/launcher=parallel",
        "model.optimizer.lr=0.001,0.003",
        *SHORT,
        f"hydra.sweep.dir={sweep}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert [j.name for j in job_dirs(sweep)] == ["0", "1"]
    assert len((sweep / "summary.md").read_text().splitlines()) == 4


def test_a_failing_job_is_reported_and_the_sweep_goes_on(tmp_path):
    sweep = tmp_path / "grid"
    # n_head=3 does not divide gpt-mini's 128 dimensions: the middle job fails when its model is built.
    result = run_script("train.py", "-m", "model.net.n_head=2,3,4", *SHORT, f"hydra.sweep.dir={sweep}")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert f"error: job 1 failed ({sweep / '1'}): n_embd=128 is not divisible by n_head=3" in result.stderr
    assert f"error: 1 job(s) of the sweep failed: {sweep / '1'}" in result.stderr
    assert [j.name for j in job_dirs(sweep) if (j / "result.json").is_file()] == ["0", "2"]  # jobs 1 and 3 ran
    assert "model.net.n_head=3" in json.loads((sweep / "1" / "failed.json").read_text())["overrides"]
    table = (sweep / "summary.md").read_text()
    # Every parameter the sweep was given is a column (SHORT's too); job 1's n_head cell holds 3, its metric "failed".
    header, row = table.splitlines()[0].split(" | "), next(r for r in table.splitlines() if r.startswith("| 1 |"))
    assert row.split(" | ")[header.index("model.net.n_head")] == "3" and row.endswith("| failed |")
    assert f"- job 1 ({sweep / '1'}): n_embd=128 is not divisible" in table
    assert len([line for line in table.splitlines() if line.startswith("| ")]) == 1 + 3


def test_optuna_records_a_failing_trial_and_completes_the_others(tmp_path):
    sweep = tmp_path / "optuna"
    result = run_script(
        "train.py",
        "hparams_search=gpt_optuna",
        "hydra.sweeper.n_trials=4",
        "hydra.sweeper.sampler.n_startup_trials=4",
        "model.net.n_head=choice(3,4)",
        *SHORT,
        f"hydra.sweep.dir={sweep}",
        env={"HYDRA_FULL_ERROR": "1"},
    )
    failed = [j for j in job_dirs(sweep) if (j / "failed.json").is_file()]
    done = [j for j in job_dirs(sweep) if (j / "result.json").is_file()]
    assert len(job_dirs(sweep)) == 4 and failed and done, result.stderr[-3000:]  # the study went on after a failure
    assert all("model.net.n_head=3" in json.loads((j / "failed.json").read_text())["overrides"] for j in failed)
    assert "Traceback" in result.stderr and "is not divisible by n_head=3" in result.stderr  # HYDRA_FULL_ERROR=1
    assert result.returncode == 1
    best = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert best["best_value"] == pytest.approx(min(json.loads((j / "result.json").read_text())["value"] for j in done))


def test_plain_multirun_places_its_sweep_under_the_start_directory(tmp_path):
    """`python train.py -m ...` exactly as docs/scale-out.md writes it, with no hydra.sweep.dir: the sweeper must
    resolve the sweep directory itself (${hydra:runtime.cwd} cannot be resolved there) and put it under ./logs."""
    result = run_script("train.py", "-m", "seed=1,2", *SHORT, "trainer.max_steps=2", "logger=none", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    (sweep,) = (tmp_path / "logs" / "train" / "multiruns").iterdir()
    assert [j.name for j in job_dirs(sweep)] == ["0", "1"]
    assert all((job / "result.json").is_file() for job in job_dirs(sweep))
