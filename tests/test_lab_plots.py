"""The evidence the lab's report draws and says, on hand-made sweeps (no training): each arm's 95% t-interval, the
paired differences of its two-arm claim checks (the numbers behind lab_paired_differences.png, checked against the
recorded values and stats.py, not as pixels), and what each job trained on in the Measured header."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from test_lab_integrity import check, docs_with_markers, make_sweep

from zoo.entry.records import code_version, run_record
from zoo.lab.decide import stats
from zoo.lab.decide.evidence import arm_summary, paired_differences
from zoo.lab.decide.sweep import load_sweep
from zoo.lab.report.plots import PAIRED_PLOT
from zoo.lab.report.publish import publish
from zoo.lab.report.report import write_report
from zoo.lab.report.work import job_work

T_975_4 = 2.7764451051977987  # Student's t, 97.5% quantile, 4 degrees of freedom (printed tables)
A = [1.00, 1.03, 0.98, 1.01, 0.985]
B = [1.10, 1.115, 1.11, 1.125, 1.06]  # noise unlike A's: the differences have a spread


def by_hand(values: list[float]) -> tuple[float, float]:
    """The 95% t-interval of the mean of five values, written out."""
    half = T_975_4 * np.std(values, ddof=1) / math.sqrt(len(values))
    return float(np.mean(values) - half), float(np.mean(values) + half)


def test_an_arm_is_drawn_with_its_seeds_and_the_t_interval_of_its_mean():
    arm = arm_summary(A)
    assert arm.values == A
    assert arm.mean == pytest.approx(np.mean(A))
    assert arm.interval == pytest.approx(by_hand(A))
    assert arm.interval == stats.one_sample(A, 0.0).interval()
    assert arm_summary([1.0]).interval is None  # one seed: no spread, no interval
    assert arm_summary([1.0, math.inf]).interval is None  # a diverged seed: no interval either


def test_the_paired_difference_figure_holds_each_seeds_a_minus_b_and_the_paired_interval(tmp_path):
    root = make_sweep(tmp_path / "sweep", {"a": A, "b": B}, [check("a < b", "less", "a", "b", smallest_effect=0.02)])
    path, _, plots = write_report(root)
    figure = root / PAIRED_PLOT
    assert figure in plots and figure.read_bytes()[:4] == b"\x89PNG"
    assert f"]({PAIRED_PLOT})" in path.read_text()  # linked from the report like the other plots

    [diff] = paired_differences(load_sweep(root))
    assert diff.check == "a < b" and (diff.a, diff.b) == ("p=a", "p=b")
    assert diff.seeds == ["1", "2", "3", "4", "5"]
    assert diff.differences == pytest.approx([x - y for x, y in zip(A, B)])  # a - b, seed by seed
    d = [x - y for x, y in zip(A, B)]
    assert diff.mean == pytest.approx(np.mean(d)) and diff.mean < 0
    assert diff.interval == pytest.approx(by_hand(d))
    assert diff.interval == pytest.approx(stats.paired(B, A).interval())  # the interval the check was decided on
    assert diff.band == 0.02


def test_a_similar_check_shades_its_equivalence_bound_and_a_factor_check_its_log_ratio(tmp_path):
    checks = [
        check("a ~ b", "similar", "a", "b", smallest_effect=0.2),
        check("b > a by 5%", "greater", "b", "a", factor=1.05),
    ]
    similar, factor = paired_differences(load_sweep(make_sweep(tmp_path, {"a": A, "b": B}, checks)))
    assert similar.band == pytest.approx(0.2)  # a claim's bound: the smallest effect, in the metric's units
    assert factor.differences == pytest.approx([math.log(y / x) for x, y in zip(A, B)])
    assert factor.band == pytest.approx(math.log(1.05))
    assert factor.interval == pytest.approx(stats.paired(np.log(A), np.log(B)).interval())


def test_no_panel_for_unpaired_seeds_sanity_checks_or_trends_and_then_no_figure(tmp_path):
    checks = [
        check("a < b, seeds differ", "less", "a", "b"),
        check("a < c, sanity", "less", "a", "c", kind="sanity"),
        check("a < c < b", "increasing", "a", "c", "b"),
    ]
    root = make_sweep(tmp_path, {"a": A, "b": B[:3], "c": [x + 0.05 for x in A]}, checks)
    assert paired_differences(load_sweep(root)) == []
    _, _, plots = write_report(root)
    assert not (root / PAIRED_PLOT).exists() and len(plots) == 1


def lm_configs(root: Path, steps: int = 600, batch: int = 12, block: int = 64) -> None:
    """Give every job the parts of a character-LM config the work is computed from, and a start time (Hydra's
    .hydra/config.yaml) 30 s before its result.json."""
    for path in root.glob("*/config_resolved.yaml"):
        config = OmegaConf.load(path)
        config.trainer = {"max_steps": steps}
        config.data = {"_target_": "zoo.data.LanguageModelDataModule", "batch_size": batch, "block_size": block}
        OmegaConf.save(config, path)
        started = path.parent / ".hydra" / "config.yaml"
        OmegaConf.save(config, started)
        ended = (path.parent / "result.json").stat().st_mtime
        os.utime(started, (ended - 30, ended - 30))


def test_the_measured_header_says_the_tokens_each_job_saw_beside_job_time_and_machine(tmp_path):
    root = make_sweep(tmp_path / "sweep", {"a": A, "b": B}, [check("a < b", "less", "a", "b")])
    lm_configs(root)
    tokens = "Each job trained on 460,800 tokens (600 steps x 12 x 64, computed from the config)."
    path, _, _ = write_report(root)
    sweep_line = next(line for line in path.read_text().splitlines() if line.startswith("Sweep:"))
    assert "s of job time in all" in sweep_line and tokens in sweep_line

    docs = docs_with_markers(tmp_path)
    publish(root, docs)
    text = docs.read_text()
    header = text.split("<!-- measured:handmade -->\n", 1)[1].splitlines()[0]
    assert header.startswith("Full run") and " on " in header and " thread" in header  # the machine
    assert "s of job time in all" in header and tokens in header
    # the code the jobs ran (written by train.py: make_sweep's hand-made jobs say nothing), the config's hash, the
    # jobs at once and the sweep's wall time
    assert (
        "Code: not recorded; config hash " in header and " 1 job(s) at once, " in header and "s of wall time." in header
    )


def test_the_work_of_a_job_from_its_config():
    def work(**sections):
        return job_work(OmegaConf.create(sections))

    images = work(
        trainer={"max_steps": 600}, data={"_target_": "zoo.data.ImageClassificationDataModule", "batch_size": 64}
    )
    assert (images.count, images.unit) == (38400, "images")
    sst2 = work(trainer={"max_steps": 1500}, data={"_target_": "zoo.data.GlueDataModule", "batch_size": 32})
    assert (sst2.count, sst2.unit) == (48000, "sentences")
    lm = {"_target_": "zoo.data.LanguageModelDataModule", "batch_size": 8, "block_size": 512}
    assert work(trainer={"max_steps": 400}, data=lm).count == 400 * 8 * 512
    assert work(trainer={"max_steps": 400}, data=lm, measure={"_target_": "x"}) is None  # trains nothing
    assert work(trainer={"max_steps": -1}, data=lm) is None  # an epoch budget: not known without the data


def test_the_measured_header_states_the_threads_the_jobs_ran_with_not_the_publishers(tmp_path):
    root = make_sweep(tmp_path / "sweep", {"a": A, "b": B}, [check("a < b", "less", "a", "b")])
    for result in root.glob("*/result.json"):  # as run_record writes it: the job's torch threads
        record = json.loads(result.read_text())
        record["metrics"]["threads"] = 1.0
        result.write_text(json.dumps(record))
    docs = docs_with_markers(tmp_path)
    publish(root, docs)
    header = docs.read_text().split("<!-- measured:handmade -->\n", 1)[1].splitlines()[0]
    assert ", 1 thread, torch" in header


def test_a_job_records_its_threads():
    class _Trainer:
        callbacks: list = []

    record = run_record(_Trainer(), {"val/loss": 1.5})
    assert record["metrics"] == {"val/loss": 1.5, "threads": torch.get_num_threads()}
    assert record["commit"] == code_version() and len(record["commit"].split("+")[0]) >= 12  # a checkout's commit


def test_a_difference_in_differences_gets_a_panel_of_its_per_seed_contrasts_and_the_checks_interval(tmp_path):
    a, b = [2.0, 2.1, 2.3, 2.05, 2.2, 2.4], [1.0, 1.2, 1.1, 1.0, 1.15, 1.3]
    c, d = [1.5, 1.6, 1.55, 1.7, 1.5, 1.6], [1.2, 1.2, 1.3, 1.35, 1.3]  # d lost seed 6: five seeds ran all four
    did = check("the gap shrinks", "diff_in_diff", "a", "b", "c", "d", smallest_effect=0.1)
    root = make_sweep(tmp_path / "sweep", {"a": a, "b": b, "c": c, "d": d}, [did])
    _, _, plots = write_report(root)
    assert root / PAIRED_PLOT in plots and (root / PAIRED_PLOT).read_bytes()[:4] == b"\x89PNG"

    [diff] = paired_differences(load_sweep(root))
    assert (diff.a, diff.b, diff.c, diff.d) == ("p=a", "p=b", "p=c", "p=d")
    assert diff.seeds == ["1", "2", "3", "4", "5"]  # the seeds all four points ran
    by_seed = [(a[i] - b[i]) - (c[i] - d[i]) for i in range(5)]
    assert diff.differences == pytest.approx(by_seed)
    assert diff.mean == pytest.approx(np.mean(by_seed)) and diff.interval == pytest.approx(by_hand(by_seed))
    assert diff.band == 0.1 and "smallest effect 0.1" in diff.band_label  # the line the claim must clear
    assert "(a - b) - (c - d)" in diff.unit and "above" in diff.claimed
