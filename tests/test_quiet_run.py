"""A clean run prints no warning the project could prevent (issue 16, item 11): the documented GPT recipe, a resume
of it in place and eval.py of its checkpoint, read as a user reads them."""

from __future__ import annotations

import pytest

from conftest import assert_ok, run_script

pytestmark = pytest.mark.slow

# What these commands printed before (each from Lightning or torch, each either fixed or filtered in zoo.entry.quiet).
KNOWN_NOISE = [
    "LeafSpec",  # torch's deprecation of what Lightning's pytree helper builds
    "litlogger",  # Lightning's cloud-logger tip
    "litmodels",  # Lightning's model-registry tip (eval: its Trainer has no checkpoint callback)
    "tensorboardX",
    "Skipping setting a default `ModelSummary`",
    "`weights_only` was not set",
    "not resumable",
    "Epoch 0/-2",
    "Total FLOPs",
    "exists and is not empty",
    "was called without a model",
    "no last checkpoint available",
]


def assert_quiet(result) -> None:
    assert_ok(result)
    output = result.stdout + result.stderr
    lines = output.splitlines()
    noisy = [line for line in lines if "warn" in line.lower() or any(n in line for n in KNOWN_NOISE)]
    assert not noisy, "\n".join(noisy)
    # Each log line once (Lightning's own console handler and Hydra's printed every line twice).
    logged = [line for line in lines if line.startswith("INFO: ")]
    assert logged and len(logged) == len(set(logged)), "\n".join(logged)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    logs = tmp_path_factory.mktemp("logs")
    common = [
        "experiment=gpt_shakespeare_char",
        "trainer.limit_val_batches=2",
        "test=false",
        "model.sample_tokens=20",
        # Shorter than the 3 steps: the recipe's warm-up of 100 would be warned about, rightly (zoo.optim.schedules).
        "model.scheduler.warmup_steps=2",
        f"paths.log_dir={logs}",
    ]
    first = run_script("train.py", *common, "trainer.max_steps=3")
    (run,) = (logs / "gpt_shakespeare_char" / "runs").iterdir()
    resumed = run_script("train.py", *common, "trainer.max_steps=5", "ckpt_path=last")
    return logs, run, first, resumed


def test_a_clean_run_is_quiet(trained):
    _, run, first, _ = trained
    assert_quiet(first)
    assert "Epoch 0 " in first.stdout  # the progress bar is there, without an epoch total
    assert "Total params" in first.stdout  # the model summary is there, without FLOPs
    # The log file is written, with what the console showed.
    log = (run / "gpt_shakespeare_char.log").read_text()
    assert "GPT with 809,856 parameters" in log and "`Trainer.fit` stopped: `max_steps=3` reached" in log


def test_its_resume_is_quiet(trained):
    _, run, _, resumed = trained
    assert_quiet(resumed)
    assert f"resuming from {run / 'checkpoints'}" in resumed.stdout


def test_eval_of_its_checkpoint_is_quiet(trained):
    logs, run, _, _ = trained
    result = run_script(
        "eval.py",
        f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}",
        "split=val",
        "trainer.limit_val_batches=2",
        f"paths.log_dir={logs}",
    )
    assert_quiet(result)
    assert "val/loss" in result.stdout
