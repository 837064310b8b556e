"""The entries on real data: what train, generate and eval produce (run in this process: tests/trained.py), and the
scripts train.py, generate.py and eval.py run as a user runs them (subprocesses) where the process is the point: the
README's commands, Hydra's own messages, the one-line error and exit status, DDP's processes."""

from __future__ import annotations

import csv
import json
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from trained import evaluate_in_process, evaluate_refused, one_line_error, train_in_process, train_refused

from zoo.entry import cli

from conftest import assert_ok, assert_one_line_error, run_script


@pytest.fixture(scope="module")
def trained(gpt_char_run):
    """A short run of nanoGPT's recipe: 20 steps, then validation and test (tiny shakespeare, which the package
    ships: the same text with or without a data directory); tests/trained.py, GPT_CHAR_RUN."""
    return gpt_char_run


def generated(capsys, *argv) -> str:
    """What generate.py prints for `argv`, run in this process."""
    capsys.readouterr()
    cli.generate([str(a) for a in argv])
    return capsys.readouterr().out


def test_experiment_run_writes_config_metrics_and_checkpoint(trained):
    assert (trained / "config_resolved.yaml").is_file()
    assert "${" not in (trained / "config_resolved.yaml").read_text()  # fully resolved
    rows = list(csv.DictReader(Path(trained / "csv" / "metrics.csv").read_text().splitlines()))
    losses = [float(r["train/loss"]) for r in rows if r.get("train/loss")]
    assert len(losses) == 2 and losses[-1] < losses[0] < 4.5  # logged every 10 steps, and learning
    assert any(r.get("val/loss") for r in rows) and any(r.get("test/loss") for r in rows)
    assert any(float(r["train/tokens_per_sec"]) > 0 for r in rows if r.get("train/tokens_per_sec"))
    # MFU's value depends on the machine (its measured peak); that it is reported, finite and positive does not.
    assert any(math.isfinite(float(r["train/mfu"])) and float(r["train/mfu"]) > 0 for r in rows if r.get("train/mfu"))
    samples = (trained / "csv" / "val_samples.txt").read_text()
    assert samples.count("===== step 20 =====") == 2  # two samples generated at the validation after fit


def test_run_says_where_its_wall_time_went(trained):
    """timings.json: start-up, training and after-training phases that add up to the total, 20 steps."""
    times = json.loads((trained / "timings.json").read_text())
    assert times["steps"] == 20 and times["startup_from"] == "process start"
    phases = times["time/startup_s"] + times["time/train_s"] + times["time/after_train_s"]
    assert all(times[k] > 0 for k in ("time/startup_s", "time/train_s", "time/after_train_s"))
    assert phases == pytest.approx(times["time/total_s"], abs=1e-6)


@pytest.mark.slow
def test_process_start_time_is_when_the_process_started():
    """Read from /proc in a child that sleeps 1 s first: its start lies >= 1 s before its own clock, and after the
    moment this test launched it (a wrong field of /proc/self/stat gives hours or days)."""
    launched = time.time()
    code = (
        "import json, time; time.sleep(1.0); from zoo.callbacks.phase_times import process_start_time as start; "
        "print(json.dumps([*start(), time.time()]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    started, exact, now = json.loads(out)
    assert exact
    assert launched - 0.05 <= started <= now - 1.0


def test_checkpoint_loads_weights_only_with_clean_names(trained):
    checkpoint = torch.load(trained / "checkpoints" / "last.ckpt", weights_only=True)
    assert checkpoint["global_step"] == 20
    assert not any("_orig_mod" in k for k in checkpoint["state_dict"])
    assert checkpoint["zoo"]["model_type"] == "gpt" and checkpoint["zoo"]["task"] == "causal_lm"
    assert checkpoint["zoo"]["model_config"]["n_embd"] == 128


GENERATE = ["--prompt", "ROMEO:", "--max-new-tokens", "100", "--seed", "7"]


def test_generate_is_seeded_and_continues_the_prompt(trained, capsys):
    ckpt = trained / "checkpoints" / "last.ckpt"
    first, second = generated(capsys, ckpt, *GENERATE), generated(capsys, ckpt, *GENERATE)
    assert first == second
    text = first.split("----- sample 0 -----\n", 1)[1]
    assert text.startswith("ROMEO:") and len(text.rstrip("\n")) >= 100
    other = generated(capsys, ckpt, *GENERATE[:-1], "8")
    assert other != first


@pytest.mark.slow
def test_readme_generate_command(trained, capsys):
    """generate.py as a user runs it (the README's command, with a shorter sample): the samples of the same seed."""
    result = run_script("generate.py", str(trained / "checkpoints" / "last.ckpt"), *GENERATE)
    assert_ok(result)
    assert result.stdout == generated(capsys, trained / "checkpoints" / "last.ckpt", *GENERATE)


@pytest.mark.slow
def test_generate_rejects_bad_prompts_in_one_line(trained):
    """generate.py's one-line error and exit status, as a user sees them."""
    ckpt = str(trained / "checkpoints" / "last.ckpt")
    assert_one_line_error(
        run_script("generate.py", ckpt, "--prompt", "caf\u00e9 \u20ac"), "not in the character vocabulary"
    )


def test_generate_rejects_a_prompt_longer_than_the_context(trained, capsys):
    err = one_line_error(capsys, cli.generate, trained / "checkpoints" / "last.ckpt", "--prompt", "x" * 65)
    assert "65 tokens" in err and "context is 64" in err


def test_generate_rejects_other_checkpoints(trained, tmp_path, capsys):
    checkpoint = torch.load(trained / "checkpoints" / "last.ckpt", weights_only=True)
    checkpoint["zoo"].update(task="image_classification", model_type="vit")
    torch.save(checkpoint, tmp_path / "vit.ckpt")
    err = one_line_error(capsys, cli.generate, tmp_path / "vit.ckpt")
    assert "vit" in err and "'causal_lm' checkpoint" in err
    (tmp_path / "junk.ckpt").write_bytes(b"not a checkpoint")
    assert "not a readable checkpoint" in one_line_error(capsys, cli.generate, tmp_path / "junk.ckpt")
    assert "checkpoint not found" in one_line_error(capsys, cli.generate, tmp_path / "missing.ckpt")


def test_eval_on_test_split(trained, tmp_path):
    result = evaluate_in_process(
        f"ckpt_path={trained / 'checkpoints' / 'last.ckpt'}",
        "split=test",
        "++trainer.limit_test_batches=4",  # the whole split: test_readme_eval_command_as_written
        f"hydra.run.dir={tmp_path}",
    )
    assert "test/loss" in result.stdout and result.value["test/loss"] > 0


@pytest.mark.slow
def test_readme_eval_command_as_written(trained, tmp_path):
    """`python eval.py ckpt_path=<run>/checkpoints/last.ckpt split=test`, exactly as the README writes it: no
    hydra.run.dir, started from some directory (its run goes to ./logs there)."""
    result = run_script("eval.py", f"ckpt_path={trained / 'checkpoints' / 'last.ckpt'}", "split=test", cwd=tmp_path)
    assert_ok(result)
    assert "test/loss" in result.stdout and list((tmp_path / "logs" / "eval" / "runs").iterdir())


def crafted_data(base: dict, command: str, where: str) -> dict:
    payload = {"_target_": "os.system", "_args_": [command]}
    if where == "top":  # the whole data config names a callable
        return payload
    return {**base, "text_files": payload}  # nested, where Hydra's instantiate would recurse


@pytest.mark.parametrize("where", ["top", "nested"])
def test_eval_refuses_a_checkpoint_whose_data_config_names_code(trained, tmp_path, where):
    """A checkpoint that passes torch.load(weights_only=True) may still carry a `_target_`: eval.py must not
    instantiate it. Refused in one line, and the command it names never runs."""
    marker = tmp_path / "pwned"
    checkpoint = torch.load(trained / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    base = checkpoint["datamodule_hyper_parameters"]
    checkpoint["datamodule_hyper_parameters"] = crafted_data(base, f"touch {marker}", where)
    torch.save(checkpoint, tmp_path / "crafted.ckpt")
    result = evaluate_refused(f"ckpt_path={tmp_path / 'crafted.ckpt'}", f"hydra.run.dir={tmp_path / 'run'}")
    assert "_target_" in result.line and "may not name code" in result.line
    assert not marker.exists()


def test_eval_refuses_an_unknown_recorded_datamodule(trained, tmp_path):
    checkpoint = torch.load(trained / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    checkpoint["zoo"]["datamodule"] = "subprocess.Popen"
    torch.save(checkpoint, tmp_path / "crafted.ckpt")
    result = evaluate_refused(f"ckpt_path={tmp_path / 'crafted.ckpt'}", f"hydra.run.dir={tmp_path / 'run'}")
    assert "unknown DataModule 'subprocess.Popen'" in result.line


def test_resume_continues_step_count(trained, tmp_path):
    """ckpt_path= resumes weights, optimizer and step: a 20-step checkpoint resumed to 30 ends at step 30."""
    ckpt = tmp_path / "start.ckpt"
    shutil.copy(trained / "checkpoints" / "last.ckpt", ckpt)
    run_dir = tmp_path / "resumed"
    train_in_process(
        "experiment=gpt_shakespeare_char",
        "trainer.max_steps=30",
        f"ckpt_path={ckpt}",
        "test=false",
        "trainer.limit_val_batches=2",
        f"hydra.run.dir={run_dir}",
    )
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 30


def test_fast_dev_run_of_the_main_command(tmp_path):
    result = train_in_process("model=gpt", "trainer.fast_dev_run=true", f"hydra.run.dir={tmp_path}")
    assert "Running in `fast_dev_run` mode" in result.stdout + result.stderr


@pytest.mark.slow
def test_unknown_model_name(tmp_path):
    result = run_script("train.py", "model=gpt5", f"hydra.run.dir={tmp_path}")
    assert result.returncode != 0
    assert "model/gpt5" in result.stderr and "Available options" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "overrides, fragments",
    [
        (["model.net.n_embd=50", "model.net.n_head=4"], ["n_embd=50 is not divisible by n_head=4"]),
        (["model.net.name=gpt5"], ["unknown GPT preset 'gpt5'", "gpt2-medium"]),
    ],
)
def test_bad_model_options(tmp_path, overrides, fragments):
    result = train_refused(*overrides, f"hydra.run.dir={tmp_path}")
    for fragment in fragments:
        assert fragment in result.line


def test_missing_dataset_names_the_path(tmp_path):
    """A dataset the package does not ship (tiny shakespeare it does), not downloaded: conftest sets ZOO_OFFLINE=1."""
    result = train_refused(
        "model=transformer", f"hydra.run.dir={tmp_path}", env={"ZOO_DATA_DIR": str(tmp_path / "nowhere")}
    )
    for fragment in (str(tmp_path / "nowhere" / "multi30k" / "train.de.gz"), "ZOO_DATA_DIR", "ZOO_OFFLINE"):
        assert fragment in result.line


@pytest.mark.slow
def test_two_process_ddp_on_cpu_shares_one_run_directory(tmp_path):
    """trainer=ddp_sim: two gloo processes train together and write one run directory and one checkpoint."""
    run_dir = tmp_path / "ddp"
    result = run_script(
        "train.py",
        "trainer=ddp_sim",
        "trainer.max_steps=6",
        "trainer.val_check_interval=3",
        "trainer.limit_val_batches=2",
        "test=false",
        f"hydra.run.dir={run_dir}",
    )
    assert_ok(result)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ddp"]
    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert checkpoint["global_step"] == 6
    assert not (Path.cwd() / "outputs").exists()


@pytest.mark.slow
def test_override_of_a_missing_key_suggests_the_nearest(tmp_path):
    result = run_script("train.py", "trainer.max_step=5", f"hydra.run.dir={tmp_path}")
    assert result.returncode != 0 and "Key 'max_step' is not in struct" in result.stderr
    assert "did you mean 'trainer.max_steps'?" in result.stderr


def test_bf16_mixed_with_clipping_and_fused_adamw(tmp_path):
    """Lightning refuses fused optimizers with clipping under *-mixed precision; the task falls back and trains."""
    result = train_in_process(
        "trainer.precision=bf16-mixed",
        "trainer.max_steps=3",
        "test=false",
        "trainer.val_check_interval=3",
        "trainer.limit_val_batches=1",
        f"hydra.run.dir={tmp_path}",
    )
    assert "using the foreach implementation instead" in result.stdout + result.stderr
    assert torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 3


@pytest.mark.slow
def test_keep_freed_memory_stops_page_faults_on_reallocation():
    """After keep_freed_memory(), a freed 64 MB tensor's pages are reused instead of faulted in again."""
    code = """
import resource, torch
from zoo.entry.allocator import keep_freed_memory

def faults(n):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(n):
        torch.ones(16 << 20)  # 64 MB, freed at once
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

plain = [faults(1) for _ in range(10)]
assert keep_freed_memory()
faults(5)  # the heap grows to its working size during the first few
print(*plain)
print(*[faults(1) for _ in range(10)])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    plain, kept = ([int(n) for n in line.split()] for line in out.splitlines())
    # Without the setting every allocation faults its 16,384 pages in again. With it, the pages are reused: on
    # one CI machine 3 of 10 allocations still faulted (cause not found; here none do), so the claim tested is
    # "most", not "all".
    refaulted = [n > 10_000 for n in plain], [n > 10_000 for n in kept]
    assert all(refaulted[0]), plain
    assert sum(refaulted[1]) <= 4, kept
