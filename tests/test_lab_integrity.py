"""The lab publishes only what it measured: failed and missing jobs, diverged arms, single seeds, shortened budgets
and mixed sweep folders never turn into a supported verdict; publish changes text and plots together or not at
all; bad inputs are one line naming the file; a lab run stops its sweep when it is told to stop.

The sweeps are made by hand in tmp_path, laid out as a lab multirun leaves them (no training)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from zoo.lab.report.publish import publish
from zoo.lab.report.report import write_report

from conftest import run_module

NAN = float("nan")
FAILED, STOPPED, MISSING = "failed", "stopped", "missing"  # jobs without a result
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


def make_sweep(
    root: Path,
    values: dict[str, list],
    checks: list[dict],
    *,
    task: tuple[str, ...] = (),
    config_seeds: str | None = None,
    plan: bool = True,
) -> Path:
    """A sweep directory as `python -m zoo.lab run handmade [task...]` leaves it: multirun.yaml (the plan: the
    config's sweeper params and the command line's overrides), then one folder per (point, seed) in Hydra's order
    with .hydra/overrides.yaml, config_resolved.yaml and result.json. A value FAILED leaves failed.json instead of a
    result, STOPPED a folder without either, MISSING no folder at all."""
    seeds = [str(i + 1) for i in range(max(len(v) for v in values.values()))]
    lab = {
        "name": "handmade",
        "title": "hand-made",
        "claim": "a is less than b",
        "mode": "full",
        "table": ["m"],
        "plots": [{"y": "m", "x": "p"}],
        "checks": checks,
    }
    root.mkdir(parents=True, exist_ok=True)
    if plan:
        sweeper = {"_target_": BASIC_SWEEPER, "max_batch_size": None}
        sweeper["params"] = {"p": ",".join(values), "seed": config_seeds or ",".join(seeds)}
        hydra = {"sweeper": sweeper, "overrides": {"task": ["experiment=lab/handmade", *task]}}
        OmegaConf.save(OmegaConf.create({"hydra": hydra, "lab": lab}), root / "multirun.yaml")
    fixed = [o for o in task if "," not in o]  # a swept override (seed=1,2) shows in a job as its own value
    job = 0
    for point, point_values in values.items():
        for seed, value in zip(seeds, point_values):
            folder, overrides = root / str(job), [f"p={point}", f"seed={seed}", "experiment=lab/handmade", *fixed]
            job += 1
            if value == MISSING:
                continue
            (folder / ".hydra").mkdir(parents=True, exist_ok=True)
            OmegaConf.save(OmegaConf.create(overrides), folder / ".hydra" / "overrides.yaml")
            OmegaConf.save(OmegaConf.create({"lab": lab}), folder / "config_resolved.yaml")
            if value == FAILED:
                record = {"job": job - 1, "status": "failed", "error": "RuntimeError: out of memory"}
                (folder / "failed.json").write_text(json.dumps({**record, "overrides": overrides}))
            elif value != STOPPED:
                record = {"job": job - 1, "metric": "m", "value": value, "overrides": overrides}
                (folder / "result.json").write_text(json.dumps({**record, "metrics": {"m": value}}))
    return root


def check(name: str, expect: str, *points: str, **extra) -> dict:
    return {"name": name, "metric": "m", "expect": expect, "points": [{"p": p} for p in points], **extra}


def report_of(root: Path) -> tuple[str, str]:
    path, outcome, _ = write_report(root)
    return outcome, path.read_text()


def run_lab(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`python -m zoo.lab args...` in a process of its own (forked from tests/script_server.py)."""
    return run_module("zoo.lab", *args, cwd=cwd, timeout=300)


def lab_main(capsys, *args: str) -> subprocess.CompletedProcess:
    """The same command run by its main() in this process: its exit status and what it printed."""
    from zoo.lab.run.cli import main

    capsys.readouterr()
    status = main(list(args))
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess([sys.executable, "-m", "zoo.lab", *args], status, out, err)


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> str:
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def docs_with_markers(folder: Path) -> Path:
    docs = folder / "docs" / "lab.md"
    docs.parent.mkdir(parents=True)
    docs.write_text("# Lab\n\n<!-- measured:handmade -->\nPending.\n<!-- /measured:handmade -->\n\nEnd.\n")
    return docs


# ---- the verdict never rests on what was not measured -------------------------------------------------------------


def test_a_diverged_arm_is_never_similar_to_a_finite_one(tmp_path):
    a = [2.0, 2.1, 2.05, 1.98, 2.03]
    values = {"a": a, "b": [NAN, 2.05, 2.0, 2.1, 2.02]}  # one seed of b diverged: with diverged: worst, b is the worst
    checks = [
        check("a ~ b", "similar", "a", "b", diverged="worst"),
        check("b ~ a", "similar", "b", "a", diverged="worst"),
        check("a < b", "less", "a", "b", diverged="worst"),  # worse than every finite point: still true
    ]
    outcome, text = report_of(make_sweep(tmp_path, values, checks))
    assert "**a ~ b**: contradicted" in text and "**b ~ a**: contradicted" in text, text
    assert "inf <= inf" not in text and "a diverged point is not similar" in text
    assert "**a < b**: supported" in text and outcome == "supported in part"
    # With two seeds nothing is decided, and a diverged arm is still never similar.
    outcome, text = report_of(make_sweep(tmp_path / "two", {"a": a[:2], "b": [NAN, 2.05]}, checks))
    assert "**a ~ b**: inconclusive" in text and "supported" not in text.split("### Verdict")[1].split("\n")[0]
    assert outcome == "inconclusive" and "a diverged point is not similar" in text


def test_one_seed_per_point_decides_no_check_that_rests_on_the_spread(tmp_path):
    values = {"a": [1.0], "b": [2.0], "c": [3.0]}  # one seed each: spread 0, the noise unknown
    checks = [
        check("a < b", "less", "a", "b"),
        check("a ~ b", "similar", "a", "b", smallest_effect=1.5),
        check("up", "increasing", "a", "b", "c"),
        check("c above", "above", "c", threshold=2.5),
    ]
    outcome, text = report_of(make_sweep(tmp_path, values, checks))
    for name in ("a < b", "a ~ b", "up", "c above"):
        assert f"**{name}**: inconclusive" in text, text
    assert "95% CI" not in text and "one seed per point" in text
    assert outcome == "inconclusive" and "0 supported, 0 contradicted, 4 inconclusive (of 4)" in text


def test_failed_stopped_and_missing_jobs_are_listed_and_leave_their_checks_inconclusive(tmp_path, capsys):
    values = {
        "a": [1.0, 1.1, 1.05, 0.98, 1.02],
        "b": [2.0, FAILED, MISSING, 2.1, 2.05],
        "c": [3.0, 3.1, STOPPED, 3.05, 3.02],
    }
    checks = [
        check("a < b", "less", "a", "b"),
        check("a < c", "less", "a", "c"),
        check("a above", "above", "a", threshold=0),
    ]
    sweep = make_sweep(tmp_path / "sweep", values, checks)
    outcome, text = report_of(sweep)
    assert "**3 of 15 jobs left no result**" in text, text
    assert "- job 6 (p=b, seed=2): failed: RuntimeError: out of memory" in text
    assert "- job #7 (p=b, seed=3): missing (never started)" in text
    assert "- job 12 (p=c, seed=3): no result.json" in text
    assert "**a < b**: inconclusive. job 6 (p=b, seed=2), job #7 (p=b, seed=3) left no result" in text
    assert "**a < c**: inconclusive. job 12 (p=c, seed=3) left no result" in text
    # only the check on complete points is decided; the two inconclusive ones keep the claim from "supported"
    assert "**a above**: supported" in text and outcome == "supported in part"
    printed = lab_main(capsys, "report", str(sweep)).stdout  # `report` prints the outcomes with their intervals too
    assert "### Verdict: supported in part" in printed and "**a above**: supported" in printed
    assert "95% CI" in printed and "lab-rule" not in printed

    docs = docs_with_markers(tmp_path)
    publish(sweep, docs)
    published = docs.read_text()
    assert "Full run" not in published and "Incomplete run (3 of 15 jobs left no result, listed below)" in published
    assert "- job 6 (p=b, seed=2): failed" in published and "**a < b**: inconclusive" in published

    # Without the plan (multirun.yaml) the jobs that never started are unknown, the failed ones still count.
    (sweep / "multirun.yaml").unlink()
    _, text = report_of(sweep)
    assert "**2 of 14 jobs left no result**" in text and "**a < b**: inconclusive" in text


def test_the_overrides_of_a_sweep_are_in_its_header_and_a_shortened_one_is_no_full_run(tmp_path):
    values = {"a": [1.0, 1.1], "b": [2.0, 2.1]}
    shortened = make_sweep(
        tmp_path / "short",
        values,
        [check("a < b", "less", "a", "b")],
        task=("trainer.max_steps=3", "seed=1,2"),
        config_seeds="1,2,3,4,5",
    )
    _, text = report_of(shortened)
    assert "Overrides: `trainer.max_steps=3 seed=1,2`" in text
    docs = docs_with_markers(tmp_path)
    publish(shortened, docs)
    header = docs.read_text().split("<!-- measured:handmade -->\n")[1].splitlines()[0]
    assert header.startswith("Run with overrides") and "Full run" not in header, header
    assert "`python -m zoo.lab run handmade trainer.max_steps=3 seed=1,2`" in header

    full = make_sweep(tmp_path / "full", values, [check("a < b", "less", "a", "b")])
    publish(full, docs)
    header = docs.read_text().split("<!-- measured:handmade -->\n")[1].splitlines()[0]
    assert header.startswith("Full run, ") and "`python -m zoo.lab run handmade`." in header, header


@pytest.mark.slow
@pytest.mark.lab
def test_a_sweep_folder_holding_jobs_of_an_earlier_sweep_is_refused(tmp_path):
    root = tmp_path / "sweep"
    make_sweep(root, {"a": [1.0, 1.1, 1.2], "b": [2.0, 2.1, 2.2]}, [check("a < b", "less", "a", "b")])
    # The same folder again with one seed: Hydra writes jobs 0 and 1 over the old ones, 2..5 stay from before.
    make_sweep(root, {"a": [5.0], "b": [0.0]}, [check("a < b", "less", "a", "b")])
    assert_one_line_error(run_lab("report", str(root)), str(root), "mixes jobs of more than one sweep", "fresh")
    (root / "multirun.yaml").unlink()  # without the plan: two folders ran the same job (p=b, seed=1)
    assert_one_line_error(run_lab("report", str(root)), "ran the same job as folder")
    # `lab run` refuses such a folder before anything runs.
    result = run_lab("run", "scaling", f"hydra.sweep.dir={root}", cwd=tmp_path)
    assert_one_line_error(result, str(root), "already holds a sweep")
    assert result.returncode == 2 and "running:" not in result.stdout


# ---- publish: text and plots together, or nothing ----------------------------------------------------------------


@pytest.fixture
def published(tmp_path):
    """A docs/lab.md with the question's block and plot already published once, and a second sweep to publish."""
    docs = docs_with_markers(tmp_path)
    plots = docs.parent / "lab" / "handmade"
    plots.mkdir(parents=True)
    (plots / "lab_1_m.png").write_bytes(b"the published plot")
    before = docs.read_text()
    sweep = make_sweep(tmp_path / "sweep", {"a": [1.0, 1.1], "b": [2.0, 2.1]}, [check("a < b", "less", "a", "b")])
    return sweep, docs, plots, before


def assert_unchanged(docs: Path, plots: Path, before: str) -> None:
    assert docs.read_text() == before
    assert sorted(p.name for p in plots.iterdir()) == ["lab_1_m.png"]
    assert (plots / "lab_1_m.png").read_bytes() == b"the published plot"
    assert not [p for p in plots.parent.iterdir() if p.name.startswith(".")]  # no staging folder left behind


def test_publish_refused_for_missing_or_misordered_markers_changes_nothing(published):
    sweep, docs, plots, _ = published
    for text, message in [
        ("# Lab\n\nno markers here\n", "no '<!-- measured:handmade -->'"),
        ("<!-- /measured:handmade -->\nold\n<!-- measured:handmade -->\n", "comes before"),
        ("<!-- measured:handmade -->\n<!-- /measured:handmade -->\n" * 2, "more than once"),
    ]:
        docs.write_text(text)
        with pytest.raises(ValueError, match=message):
            publish(sweep, docs)
        assert_unchanged(docs, plots, text)


@pytest.mark.slow
@pytest.mark.lab
def test_publish_to_a_read_only_file_is_one_line_and_changes_nothing(published):
    sweep, docs, plots, before = published
    docs.chmod(0o444)
    try:
        result = run_lab("publish", str(sweep), "--docs", str(docs))
    finally:
        docs.chmod(0o644)
    assert_one_line_error(result, str(docs), "read-only", "chmod u+w")
    assert_unchanged(docs, plots, before)


def test_publish_that_fails_writing_the_text_puts_the_old_plots_back(published, monkeypatch):
    import zoo.lab.report.publish as publish_module

    sweep, docs, plots, before = published

    def disk_full(path, text):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(publish_module, "_write_atomically", disk_full)
    with pytest.raises(ValueError, match="No space left on device; nothing was published"):
        publish(sweep, docs)
    assert_unchanged(docs, plots, before)

    monkeypatch.undo()
    publish(sweep, docs)  # then it works: the new plots and the per-seed CSV replace the old folder, linked
    names = ["lab_1_m.png", "lab_paired_differences.png", "lab_per_seed.csv", "result.json"]
    assert sorted(p.name for p in plots.iterdir()) == names
    for image in plots.glob("*.png"):
        assert image.read_bytes()[:4] == b"\x89PNG" and f"](lab/handmade/{image.name})" in docs.read_text()
    assert not [p for p in plots.parent.iterdir() if p.name.startswith(".")]


# ---- bad inputs: one line naming the file, no traceback -----------------------------------------------------------


def corrupt_config(sweep: Path) -> Path:
    path = sweep / "0" / "config_resolved.yaml"
    path.write_text("lab: {name: handmade\n  title: [unclosed\n")
    return path


def result_without_metric(sweep: Path) -> Path:
    path = sweep / "1" / "result.json"
    path.write_text(json.dumps({"job": 1, "value": 1.0, "overrides": ["p=a", "seed=2"]}))
    return path


def truncated_result(sweep: Path) -> Path:
    path = sweep / "2" / "result.json"
    path.write_text(path.read_text()[:25])
    return path


@pytest.mark.slow
@pytest.mark.lab
@pytest.mark.parametrize(
    ("damage", "says"),
    [(corrupt_config, "damaged"), (result_without_metric, "needs 'metric'"), (truncated_result, "not valid JSON")],
)
def test_a_damaged_sweep_file_is_a_one_line_error_naming_it(tmp_path, damage, says):
    sweep = make_sweep(tmp_path, {"a": [1.0, 1.1], "b": [2.0, 2.1]}, [check("a < b", "less", "a", "b")])
    path = damage(sweep)
    assert_one_line_error(run_lab("report", str(sweep)), str(path), says, "re-run")


@pytest.mark.slow
@pytest.mark.lab
def test_report_into_a_read_only_sweep_folder_is_a_one_line_error(tmp_path):
    sweep = make_sweep(tmp_path / "sweep", {"a": [1.0, 1.1], "b": [2.0, 2.1]}, [check("a < b", "less", "a", "b")])
    sweep.chmod(0o555)
    try:
        result = run_lab("report", str(sweep))
    finally:
        sweep.chmod(0o755)
    assert_one_line_error(result, str(sweep), "read-only", "copy the sweep")
    assert not (sweep / "report.md").exists()


@pytest.mark.slow
@pytest.mark.lab
@pytest.mark.parametrize("quick", [["--quick"], []])
def test_run_refuses_an_experiment_override(tmp_path, quick):
    result = run_lab("run", "scaling", *quick, "experiment=lab/heads", cwd=tmp_path)
    assert_one_line_error(result, "'experiment=lab/heads'", "python -m zoo.lab run <name>")
    assert result.returncode == 2 and "running:" not in result.stdout


# ---- a lab run stops its sweep -------------------------------------------------------------------------------------

# The sweep stand-in: it says its pid, then waits to be stopped and writes down the signal that stopped it.
SWEEP = """
import os, signal, sys, time
def stop(signum, frame):
    open("child.signal", "w").write(str(signum))
    sys.exit(128 + signum)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
open("child.pid", "w").write(str(os.getpid()))
time.sleep(120)
"""
# `python -m zoo.lab run scaling`, with the stand-in in place of train.py.
LAB_RUN = """
import sys
from zoo.lab.run import cli as lab
lab.train_command = lambda: [sys.executable, sys.argv[1]]
sys.exit(lab.main(["run", "scaling"]))
"""


@pytest.mark.slow
@pytest.mark.lab
@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_to_a_lab_run_stops_its_sweep(tmp_path, signum, status):
    (tmp_path / "sweep.py").write_text(SWEEP)
    lab = subprocess.Popen(
        [sys.executable, "-c", LAB_RUN, str(tmp_path / "sweep.py")], cwd=tmp_path, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "child.pid").is_file() or not (tmp_path / "child.pid").read_text():
            assert lab.poll() is None and time.monotonic() < deadline, "the sweep did not start"
            time.sleep(0.1)
        child = int((tmp_path / "child.pid").read_text())
        lab.send_signal(signum)
        assert lab.wait(timeout=60) == status
    finally:
        if lab.poll() is None:
            lab.kill()
    assert (tmp_path / "child.signal").read_text() == str(int(signum))  # the sweep got the signal, and stopped
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)
    assert f"stopped by {signal.Signals(signum).name}" in lab.stderr.read()
