"""`python -m zoo.lab gpu` (zoo/lab/run/gpu.py): the GPU plan is what issue 26 asks for and composes; scaled down to a
CPU it runs a question's sweep end to end with jobs in parallel, a failing job is reported while the others finish, and
the sweep it leaves is what `report` and `publish` take.

The scaled-down run is dot_vs_additive's (tiny shakespeare, which always resolves: the package ships a copy), so
it needs no data folder; the plan's other questions are only composed here.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from test_lab import assert_lab_report

from zoo.lab.run.gpu import PLAN, estimate_s, overrides

from conftest import ROOT, run_module


def run_lab(*args: str, timeout: int = 600):
    return run_module("zoo.lab", *args, timeout=timeout)


def test_the_plan_is_issue_26s_budget_on_a_gpu_and_its_estimate_fits_12_minutes():
    plans = {name: overrides(name, 16, cpu=False) for name in PLAN}
    assert "model.net.n_encoder_layers=6" in plans["ln_placement"]
    assert "model.net.n_decoder_layers=6" in plans["ln_placement"]
    assert "trainer.max_steps=1500" in plans["heads_multi30k"]
    assert "model.net.n_embd=16,64,256,1024" in plans["dot_vs_additive"]
    for plan in plans.values():
        assert {"trainer.accelerator=gpu", "trainer.precision=bf16-mixed", "hydra/launcher=parallel"} <= set(plan)
        assert "seed=1,2,3,4,5" in plan  # the standard of evidence: 5 seeds decide a check
        keys = [o.partition("=")[0] for o in plan]
        assert len(keys) == len(set(keys))  # one value per key: the command publish shows is the one that ran
    jobs = {name: estimate_s(name, plan, 16) for name, plan in plans.items()}
    assert [j for j, _ in jobs.values()] == [40, 25, 60]
    assert sum(s for _, s in jobs.values()) <= 12 * 60


@pytest.mark.parametrize("name", PLAN)
def test_each_gpu_plan_composes(name):
    """Every override names a key of the question's config (a typo would fail only on the GPU, minutes in)."""
    first = [o.split(",")[0] for o in overrides(name, 16, cpu=False) if not o.startswith("hydra")]
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "zoo" / "conf"), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[f"experiment=lab/{name}", *first])
    assert cfg.trainer.accelerator == "gpu" and cfg.trainer.precision == "bf16-mixed"


@pytest.mark.slow
@pytest.mark.lab
def test_unknown_question_or_no_jobs_is_a_one_line_error(tmp_path):
    result = run_lab("gpu", "--cpu", "--only", "scaling", "--out", str(tmp_path))
    assert result.returncode == 2 and "has no GPU budget" in result.stderr
    result = run_lab("gpu", "--jobs", "0", "--out", str(tmp_path))
    assert result.returncode == 2 and "--jobs 0" in result.stderr
    assert not any(tmp_path.iterdir())  # nothing ran


@pytest.mark.slow
@pytest.mark.lab
def test_dry_run_prints_each_questions_estimate_and_command_and_runs_nothing(tmp_path):
    result = run_lab("gpu", "--dry-run", "--out", str(tmp_path))  # no GPU needed to look at the plan
    assert result.returncode == 0, result.stderr
    for name, jobs in zip(PLAN, (40, 25, 60)):
        assert f"== {name}: {jobs} jobs, 16 at a time; estimate on one H100/H200" in result.stdout
        assert f"would run: python -m zoo.lab run {name} " in result.stdout
    assert "trainer.precision=bf16-mixed" in result.stdout and not any(tmp_path.iterdir())


@pytest.mark.slow
@pytest.mark.lab
def test_a_question_whose_folder_holds_a_sweep_is_refused_and_the_next_still_tried(tmp_path):
    for name in ("ln_placement", "heads_multi30k"):  # both folders taken: neither runs, both are reported
        (tmp_path / name / "0").mkdir(parents=True)
    result = run_lab("gpu", "--cpu", "--only", "ln_placement,heads_multi30k", "--out", str(tmp_path))
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    for name in ("ln_placement", "heads_multi30k"):
        assert f"  {name}: exit 2: not run: {tmp_path / name} already holds a sweep" in result.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without a GPU")
@pytest.mark.slow
@pytest.mark.lab
def test_without_a_gpu_the_full_run_stops_before_any_job(tmp_path):
    result = run_lab("gpu", "--out", str(tmp_path))
    assert result.returncode == 2 and "no CUDA GPU on this machine" in result.stderr
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
@pytest.mark.lab
def test_scaled_down_run_reports_a_failing_job_and_leaves_a_sweep_publish_takes(tmp_path):
    out = tmp_path / "gpu"
    # n_head=3 does not divide d_k 16: those jobs fail when their model is built, the n_head=1 jobs run on.
    result = run_lab(
        "gpu", "--cpu", "--jobs", "2", "--only", "dot_vs_additive", "--out", str(out), "model.net.n_head=1,3"
    )
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    assert "== dot_vs_additive: 4 jobs, 2 at a time; estimate on one H100/H200" in result.stdout
    assert "dot_vs_additive: exit 1: 2 of 4 jobs done, verdict: " in result.stdout
    assert result.stdout.count("failed: n_embd=16 is not divisible by n_head=3") == 4  # 2 jobs, said twice
    sweep = out / "dot_vs_additive"
    done = sorted(p.parent.name for p in sweep.glob("*/result.json"))
    assert len(done) == 2 and len(list(sweep.glob("*/failed.json"))) == 2
    for job in done:  # the scaled-down budget: CPU, fp32, the quick steps
        overrides_run = json.loads((sweep / job / "result.json").read_text())["overrides"]
        assert "trainer.accelerator=cpu" in overrides_run and "trainer.max_steps=8" in overrides_run
    # dot_vs_additive's real run in the suite (see QUICK in tests/test_lab.py): its plots, the cost probe's numbers
    records = assert_lab_report(sweep, min_arms=2, quick=False)
    assert all(r["metrics"]["probe/cost/compared_over_step"] > 0 for r in records)
    assert run_lab("report", str(sweep)).returncode == 0
    docs = tmp_path / "docs" / "lab.md"
    docs.parent.mkdir()
    shutil.copy(ROOT / "docs" / "lab.md", docs)
    published = run_lab("publish", str(sweep), "--docs", str(docs))
    assert published.returncode == 0, published.stderr
    text = docs.read_text()
    assert "Incomplete run (2 of 4 jobs left no result" in text and "lab.mode=scaled_down" in text
    assert "Code: not recorded" not in text.split("<!-- measured:dot_vs_additive -->", 1)[1].splitlines()[0]
    assert (tmp_path / "docs" / "lab" / "dot_vs_additive" / "lab_per_seed.csv").is_file()
