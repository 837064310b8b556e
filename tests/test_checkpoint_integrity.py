"""Checkpoints a run can trust: atomic writes that survive SIGKILL with TMPDIR elsewhere, resume that picks the newest
checkpoint that made progress, a weights checksum verified at every load, and one-line refusals (another model, a
pickle that runs code) through the entries (run in this process: tests/trained.py; eval.py as a process too)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from trained import GPT_CHAR_RUN, evaluate_refused, one_line_error, train_in_process, train_refused

from zoo.checkpointing.atomic_io import AtomicCheckpointIO, remove_orphans, temp_path
from zoo.checkpointing.choosing import newest_checkpoint
from zoo.checkpointing.reading import check_checkpoint_file, read_checkpoint, torch_load_weights
from zoo.checkpointing.weights_checksum import verify_checkpoint
from zoo.entry import cli
from zoo.entry.resolvers import resolve_ckpt_path

from conftest import QUIET_SHORT_RUN, ROOT, assert_ok, assert_one_line_error, run_script

FAST = [*QUIET_SHORT_RUN, "optimized_metric=null"]
STEPS = 20  # of the shared GPT run (tests/trained.py, GPT_CHAR_RUN)


def step_of(path: Path) -> int:
    return torch.load(path, weights_only=True, mmap=True)["global_step"]


@pytest.fixture(scope="module")
def good_run(gpt_char_run) -> Path:
    """A real GPT run of the train entry (the session's, 20 steps); tests copy its directory before changing
    anything."""
    assert step_of(gpt_char_run / "checkpoints" / "last.ckpt") == STEPS
    return gpt_char_run


def corrupted_copy(source: Path, target: Path) -> Path:
    """`source` with 100 kB zeroed in the middle of its largest weight, re-saved with the recorded checksum."""
    checkpoint = torch.load(source, weights_only=True)
    weights = [k for k in checkpoint["state_dict"] if k.startswith("net.")]
    key = max(weights, key=lambda k: checkpoint["state_dict"][k].nbytes)
    raw = checkpoint["state_dict"][key].view(-1).view(torch.uint8)
    assert raw.numel() > 200_000, "the largest weight is too small to zero 100 kB in its middle"
    middle = raw.numel() // 2
    assert raw[middle - 50_000 : middle + 50_000].any()
    raw[middle - 50_000 : middle + 50_000] = 0
    torch.save(checkpoint, target)
    return target


class Payload:
    """Unpickling this runs code: it would create `marker`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


# ---- item 8: weights checksum ----------------------------------------------------------------------------------
def test_checksum_recorded_and_verified(good_run):
    checkpoint = read_checkpoint(good_run / "checkpoints" / "last.ckpt")
    assert checkpoint["zoo"]["weights_checksum"].startswith("blake2b:")
    assert verify_checkpoint(checkpoint, "x") is True
    del checkpoint["zoo"]["weights_checksum"]  # a checkpoint of an older zoo: nothing to verify, still loads
    assert verify_checkpoint(checkpoint, "x") is False
    checkpoint["zoo"]["weights_checksum"] = "blake2b:" + "0" * 64
    with pytest.raises(ValueError, match="weights do not match their checksum"):
        verify_checkpoint(checkpoint, "x")


def test_corrupted_weights_refused_by_train_eval_generate(good_run, tmp_path, capsys):
    bad = corrupted_copy(good_run / "checkpoints" / "last.ckpt", tmp_path / "bad.ckpt")
    message = f"{bad}: weights do not match their checksum (the file is corrupted)"
    train = train_refused(*FAST, f"ckpt_path={bad}", "trainer.max_steps=6", f"hydra.run.dir={tmp_path / 'r'}")
    assert message in train.line
    assert not (tmp_path / "r" / "checkpoints").exists()  # refused before anything was written
    assert message in evaluate_refused(f"ckpt_path={bad}", f"hydra.run.dir={tmp_path / 'e'}").line
    assert message in one_line_error(capsys, cli.generate, bad, "--max-new-tokens", "5")


@pytest.mark.slow
def test_eval_py_refuses_corrupted_weights_in_one_line(good_run, tmp_path):
    """eval.py's own one-line error and exit status for an error its entry raises, as a user sees them."""
    bad = corrupted_copy(good_run / "checkpoints" / "last.ckpt", tmp_path / "bad.ckpt")
    result = run_script("eval.py", f"ckpt_path={bad}", f"hydra.run.dir={tmp_path / 'e'}")
    assert_one_line_error(result, f"{bad}: weights do not match their checksum (the file is corrupted)")


def test_lightning_resume_verifies_the_checksum(good_run, tmp_path):
    """The check inside Lightning's restore (on_load_checkpoint), for a checkpoint that reaches fit unchecked."""
    import lightning as L

    from zoo.callbacks.progress_on_exception import ProgressOnExceptionCheckpoint
    from zoo.tasks import ZooTask

    bad = corrupted_copy(good_run / "checkpoints" / "last.ckpt", tmp_path / "bad.ckpt")
    task = ZooTask.load_from_checkpoint(good_run / "checkpoints" / "last.ckpt")
    on_exception = ProgressOnExceptionCheckpoint(tmp_path / "ckpts")
    trainer = L.Trainer(
        max_steps=8,
        logger=False,
        enable_progress_bar=False,
        default_root_dir=tmp_path,
        callbacks=[on_exception],
        plugins=[AtomicCheckpointIO()],
    )
    tokens = torch.randint(0, task.net.config.vocab_size, (4, 65))
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(tokens[:, :-1], tokens[:, 1:].contiguous()), batch_size=2
    )
    with pytest.raises(ValueError, match=f"{bad}: weights do not match their checksum"):
        trainer.fit(task, train_dataloaders=loader, ckpt_path=str(bad))
    assert not Path(on_exception.ckpt_path).exists()  # a failed start at step 0 writes no on_exception.ckpt


def test_exports_carry_and_verify_the_checksum(tmp_path):
    from safetensors.torch import load_file, save_file

    from zoo.interop import load_hf, save_hf
    from zoo.models import GPT, ZooModel

    model = GPT.from_preset("gpt-nano", vocab_size=500)
    model.save_pretrained(tmp_path / "zoo")
    save_hf(model, tmp_path / "hf")
    assert ZooModel.from_pretrained(tmp_path / "zoo").config == model.config
    load_hf(tmp_path / "hf")
    for directory, load in ((tmp_path / "zoo", ZooModel.from_pretrained), (tmp_path / "hf", load_hf)):
        file = directory / "model.safetensors"
        data = bytearray(file.read_bytes())
        middle = len(data) // 2
        data[middle - 50_000 : middle + 50_000] = bytes(100_000)  # header untouched: safetensors reads it fine
        file.write_bytes(bytes(data))
        with pytest.raises(ValueError, match=f"{file}: weights do not match their checksum"):
            load(directory)
        # Written without the checksum (another tool, an older zoo): loads as it is.
        save_file(load_file(file), file, metadata={"format": "pt"})
        load(directory)


# ---- item 4: atomic writes --------------------------------------------------------------------------------------
def test_atomic_save_writes_beside_the_target_and_cleans_up(tmp_path, monkeypatch):
    elsewhere = tmp_path / "tmpdir"
    elsewhere.mkdir()
    monkeypatch.setenv("TMPDIR", str(elsewhere))
    target = tmp_path / "ckpts" / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"state_dict": {"w": torch.ones(3)}}, target)
    io.save_checkpoint({"state_dict": {"w": torch.zeros(3)}}, target)
    assert torch.load(target, weights_only=True)["state_dict"]["w"].sum() == 0
    assert list(elsewhere.iterdir()) == [] and sorted(p.name for p in target.parent.iterdir()) == ["last.ckpt"]
    orphan = target.with_name(".last.ckpt.tmp-999999")
    orphan.write_bytes(b"half a checkpoint")
    assert temp_path(target).name.startswith(".last.ckpt.tmp-")
    assert remove_orphans(target.parent) == [orphan] and target.is_file() and not orphan.exists()


def test_lightning_loads_refuse_code(tmp_path):
    marker = tmp_path / "code-ran"
    torch.save({"state_dict": {}, "evil": Payload(marker)}, tmp_path / "evil.ckpt")
    with pytest.raises(ValueError, match="evil.ckpt was refused: it contains code"):
        AtomicCheckpointIO().load_checkpoint(tmp_path / "evil.ckpt")
    assert not marker.exists()
    (tmp_path / "junk.ckpt").write_bytes(b"not a checkpoint")  # no pickle at all: unreadable, not "code"
    with pytest.raises(ValueError, match="junk.ckpt is not a readable checkpoint"):
        torch_load_weights(tmp_path / "junk.ckpt")


def _temp_files(directory: Path, pid: int | None = None) -> list[Path]:
    pattern = f".*.ckpt.tmp-{pid}" if pid is not None else ".*.ckpt.tmp-*"
    return sorted(directory.glob(pattern)) if directory.is_dir() else []


@pytest.mark.slow
def test_sigkill_during_saves_never_breaks_last_ckpt(tmp_path):
    """A model large enough that saves take a while, a checkpoint every step, TMPDIR on another directory; SIGKILL
    while a save of last.ckpt is in flight, at two delays after its temporary file appears. Every time the last
    good last.ckpt still loads and verifies; the next start removes the dead save's temporary file."""
    run, elsewhere = tmp_path / "run", tmp_path / "tmpdir"
    elsewhere.mkdir()
    ckpts = run / "checkpoints"
    args = [
        *FAST,
        "model.net.n_layer=6",
        "model.net.n_embd=256",
        "data.batch_size=2",
        "callbacks.model_checkpoint.monitor=null",
        "+callbacks.model_checkpoint.every_n_train_steps=1",
        "auto_resume=true",
        f"hydra.run.dir={run}",
    ]
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", "TMPDIR": str(elsewhere)}
    previous_pid, previous_step = None, 0
    for delay in (0.0, 0.2):
        with open(tmp_path / "stderr.txt", "w") as stderr:
            process = subprocess.Popen(
                [sys.executable, str(ROOT / "train.py"), *args, "trainer.max_steps=100000"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
            deadline = time.time() + 300  # a guard against a hung run, not a timing assertion
            caught = False
            while time.time() < deadline and process.poll() is None:
                last = ckpts / "last.ckpt"
                if last.exists() and _temp_files(ckpts, process.pid):
                    if previous_pid is not None:  # this start removed what the killed one left
                        assert _temp_files(ckpts, previous_pid) == []
                    if temp_path(last).with_name(f".last.ckpt.tmp-{process.pid}").exists():
                        caught = True
                        break
                time.sleep(0.002)
            if not caught:
                process.kill()
                pytest.fail(f"no save of last.ckpt observed:\n{(tmp_path / 'stderr.txt').read_text()[-3000:]}")
            time.sleep(delay)
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=60)
        assert list(elsewhere.iterdir()) == []  # nothing goes through TMPDIR
        step = check_checkpoint_file(ckpts / "last.ckpt")  # complete, weights only, checksum verified
        assert step >= max(previous_step, 1)
        previous_pid, previous_step = process.pid, step

    # The top-k step_*.ckpt is saved before last.ckpt, so the newest good checkpoint may be one step ahead of it.
    resume_step = step_of(newest_checkpoint(run))
    final = run_script("train.py", *args, f"trainer.max_steps={resume_step + 2}", env={"TMPDIR": str(elsewhere)})
    assert_ok(final)
    assert step_of(ckpts / "last.ckpt") == resume_step + 2
    assert _temp_files(ckpts) == [] and not list(ckpts.glob("*-v1.ckpt"))


# ---- item 5: resume picks the right checkpoint -----------------------------------------------------------------
def test_resume_last_skips_a_failed_start_and_a_truncated_file(good_run, tmp_path):
    logs = tmp_path / "logs"
    runs = logs / "gpt_shakespeare_char" / "runs"  # the recipe's task_name
    shutil.copytree(good_run, runs / "2026-01-01_00-00-00")
    good = runs / "2026-01-01_00-00-00" / "checkpoints" / "last.ckpt"
    # The command of the good run (its recorded overrides), but for its length.
    common = [*(o for o in GPT_CHAR_RUN if not o.startswith("trainer.max_steps=")), f"paths.log_dir={logs}"]
    # A later run that fails at its start (an invalid optimizer setting, raised inside fit): zoo writes no
    # checkpoint for it; Lightning's own OnExceptionCheckpoint, as zoo had it, leaves a step-0 on_exception.ckpt,
    # the newest checkpoint on disk.
    # (torch checks eps when the optimizer is built, inside fit; the config checks do not look at it)
    bad_start = [*common, "+model.optimizer.eps=-1"]
    failed = train_refused(*bad_start)
    assert "Invalid epsilon value" in failed.line
    assert list(runs.glob("*/checkpoints/on_exception.ckpt")) == []
    lightning_own = "callbacks.on_exception._target_=lightning.pytorch.callbacks.OnExceptionCheckpoint"
    train_refused(*bad_start, lightning_own)
    (step0,) = list(runs.glob("*/checkpoints/on_exception.ckpt"))
    assert step_of(step0) == 0
    # And a run whose last.ckpt was cut short (an old non-atomic save killed midway), newer still.
    truncated = runs / "2026-12-31_00-00-00" / "checkpoints" / "last.ckpt"
    truncated.parent.mkdir(parents=True)
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    # Both stand for earlier starts of the same command (a resume continues only runs of its own overrides:
    # zoo.entry.resume): they carry the good run's recorded overrides.
    for run in (step0.parent.parent, truncated.parent.parent):
        shutil.rmtree(run / ".hydra", ignore_errors=True)
        shutil.copytree(good.parent.parent / ".hydra", run / ".hydra")

    resumed = train_in_process(*common, "ckpt_path=last", f"trainer.max_steps={STEPS + 2}")
    output = resumed.stdout + resumed.stderr
    chosen = [line for line in output.splitlines() if "checkpoint chosen:" in line]
    assert len(chosen) == 1 and f"{good} (step {STEPS})" in chosen[0], output[-3000:]
    assert f"{step0} (no progress (step 0" in chosen[0] and f"{truncated} (is not a readable checkpoint" in chosen[0]
    assert step_of(good) == STEPS + 2  # resumed from the good run's last step in place, two steps further


def test_run_dir_continues_the_run_with_the_newest_good_checkpoint(good_run, tmp_path):
    from zoo.entry.resolvers import run_dir

    runs = tmp_path / "runs"
    shutil.copytree(good_run, runs / "a")
    newer = runs / "b" / "checkpoints"
    newer.mkdir(parents=True)
    torch.save({"state_dict": {}, "global_step": 0}, newer / "on_exception.ckpt")  # a failed start, newest
    shutil.copytree(runs / "a" / ".hydra", runs / "b" / ".hydra")  # of the same command
    overrides = list(OmegaConf.load(runs / "a" / ".hydra" / "overrides.yaml"))
    assert run_dir(str(runs), "fresh", "last", False, overrides) == str(runs / "a")
    assert run_dir(str(runs), "fresh", None, True, overrides) == str(runs / "a")
    assert run_dir(str(runs), "fresh", None, False, overrides) == f"{runs}/fresh"
    # Another command's start (other overrides) never continues the run.
    assert run_dir(str(runs), "other", None, True, [*overrides, "seed=3"]) == f"{runs}/other"
    shutil.rmtree(runs / "a")
    assert run_dir(str(runs), "fresh", "last", False, overrides) == f"{runs}/fresh"  # nothing usable: a fresh one


def test_ckpt_path_last_with_nothing_usable_is_one_line(tmp_path):
    run = tmp_path / "logs" / "train" / "runs" / "r1"
    (run / "checkpoints").mkdir(parents=True)
    torch.save({"state_dict": {}, "global_step": 0}, run / "checkpoints" / "on_exception.ckpt")
    (run / "checkpoints" / "last.ckpt").write_bytes(b"PK\x03\x04 cut")
    cfg = OmegaConf.create(
        {
            "ckpt_path": "last",
            "task_name": "train",
            "paths": {"output_dir": str(run), "log_dir": str(tmp_path / "logs")},
        }
    )
    with pytest.raises(ValueError) as error:
        resolve_ckpt_path(cfg)
    message = str(error.value)
    assert "\n" not in message and "no earlier run of task 'train'" in message
    assert "on_exception.ckpt (no progress" in message and "last.ckpt (is not a readable checkpoint" in message
    cfg.ckpt_path, cfg.auto_resume = None, True
    assert resolve_ckpt_path(cfg) is None  # auto_resume: nothing usable, a fresh start


# ---- item 9: one line, through the entry points -----------------------------------------------------------------
def test_another_models_checkpoint_is_one_line(good_run, tmp_path):
    last = good_run / "checkpoints" / "last.ckpt"
    result = train_refused(
        *FAST, f"ckpt_path={last}", "model.net.n_embd=64", "trainer.max_steps=6", f"hydra.run.dir={tmp_path}"
    )
    assert f"ckpt_path {last} holds a gpt model with n_embd=128" in result.line
    assert "builds a gpt with n_embd=64" in result.line
    assert not (tmp_path / "checkpoints" / "on_exception.ckpt").exists()


def test_another_model_types_checkpoint_is_named(good_run):
    from zoo.checkpointing.reading import check_same_model
    from zoo.models import GPT, ViT
    from zoo.models.vit import ViTConfig

    checkpoint = torch.load(good_run / "checkpoints" / "last.ckpt", weights_only=True)
    check_same_model(checkpoint, GPT.from_config_dict(checkpoint["zoo"]["model_config"]), "x.ckpt")  # fits
    vit = ViT(
        ViTConfig(
            image_size=28, patch_size=7, in_channels=1, num_classes=10, embed_dim=32, depth=1, num_heads=2, mlp_dim=64
        )
    )
    with pytest.raises(ValueError, match="ckpt_path x.ckpt holds a gpt model, but this run builds a vit"):
        check_same_model(checkpoint, vit, "x.ckpt")


def test_a_checkpoint_naming_the_optimizers_former_module_resumes_under_its_new_name(good_run, tmp_path):
    """Checkpoints written before the optimizers moved from zoo.tasks to zoo.optim record the old module; resuming one
    under a config that names the new module is the same optimizer, not "another kind"."""
    from zoo.checkpointing.reading import check_resume
    from zoo.models import GPT

    checkpoint = torch.load(good_run / "checkpoints" / "last.ckpt", weights_only=True)
    checkpoint["hyper_parameters"]["optimizer"] = {"_target_": "zoo.tasks.muon.MuonWithAdamW", "_partial_": True}
    torch.save(checkpoint, tmp_path / "old.ckpt")
    net = GPT.from_config_dict(checkpoint["zoo"]["model_config"])
    check_resume(tmp_path / "old.ckpt", net, {"_target_": "zoo.optim.muon.MuonWithAdamW", "_partial_": True})
    with pytest.raises(ValueError, match="holds the state of a zoo.optim.muon.MuonWithAdamW optimizer"):
        check_resume(tmp_path / "old.ckpt", net, {"_target_": "torch.optim.adamw.AdamW", "_partial_": True})


def test_pickle_payload_refused_by_train_and_bert_pretrained(tmp_path):
    marker = tmp_path / "code-ran"
    evil = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {}, "global_step": 3, "zoo": Payload(marker)}, evil)
    refusal = f"{evil} was refused: it contains code (pickled Python objects), not weights"
    assert refusal in train_refused(f"ckpt_path={evil}", f"hydra.run.dir={tmp_path / 'r'}").line
    # As docs/models.md writes it: data.pretrained follows model.pretrained, so the data module reads the file first
    # (for the tokenizer it stores) and must refuse it the same way.
    bert = ["experiment=bert_sst2", f"model.pretrained={evil}", f"hydra.run.dir={tmp_path / 'b'}"]
    assert refusal in train_refused(*bert).line
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text('{"model_type": "bert"}')
    torch.save({"w": Payload(marker)}, hf / "pytorch_model.bin")
    from zoo.tasks.classification import load_pretrained_bert

    with pytest.raises(ValueError, match="pytorch_model.bin was refused: it contains code"):
        load_pretrained_bert(hf)
    assert not marker.exists()  # nothing ran
