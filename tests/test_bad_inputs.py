"""Every bad input is one clear line (issue 16, items 7, 9 and 10): a non-zero exit, no traceback, and a message that
names the key or file and how to fix it. Through the real entry scripts in subprocesses where the process is the
point (Hydra's own phase, the script's hint and exit status); through the entries run in this process
(tests/trained.py) where the line comes from the run; in-process where a function gives the same line.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import subprocess
import sys
from functools import partial

import lightning as L
import pytest
import torch
from omegaconf import OmegaConf
from trained import evaluate_in_process, evaluate_refused, one_line_error, train_refused

from zoo.data import LanguageModelDataModule
from zoo.data.glue import read_tsv
from zoo.data.resumable import ResumableShuffle, check_fills_a_batch, resumable_sampler
from zoo.data.sources import DATASETS, DatasetFile, resolve_dataset
from zoo.data.translation import read_lines
from zoo.entry import cli
from zoo.entry.config_checks import check_config
from zoo.entry.errors import hydra_errors_in_one_line, one_line_errors, user_message
from zoo.models import GPT
from zoo.optim.build import build_optimizer

from conftest import ROOT, assert_one_line_error, run_script

# A short run: no validation/test passes, no samples, no sweep metric.
QUICK = ["validate=false", "test=false", "trainer.max_steps=2", "trainer.limit_val_batches=1", "optimized_metric=null"]


# ---- item 7: a training split smaller than one batch ------------------------------------------------------------
def test_training_split_smaller_than_a_batch_is_refused(tmp_path):
    result = train_refused("experiment=bert_sst2", "data.max_train_rows=10", *QUICK, f"hydra.run.dir={tmp_path}")
    assert "the training split has 10 rows but data.batch_size=32 with drop_last leaves no batch" in result.line
    assert "lower" in result.line
    assert not (tmp_path / "result.json").exists()


@pytest.mark.parametrize(
    "rows, batch, world, accumulate, message",
    [
        (40, 64, 1, 1, "the training split has 40 rows but data.batch_size=64 with drop_last"),  # an image folder
        (40, 16, 4, 1, "has 40 rows but data.batch_size=64 (16 per process: 4 processes x 1 accumulation"),
        (30, 16, 2, 2, "has 30 rows but data.batch_size=64 (16 per process: 2 processes x 2 accumulation"),
    ],
)
def test_the_sampler_refuses_a_split_without_a_whole_batch(rows, batch, world, accumulate, message):
    sampler = ResumableShuffle(list(range(rows)), seed=0, world_size=world)
    with pytest.raises(ValueError, match="lower data.batch_size") as refused:
        sampler.set_step(0, batch_size=batch, accumulate=accumulate)
    assert message in str(refused.value)
    check_fills_a_batch(ResumableShuffle(list(range(rows)), seed=0), rows)  # exactly one batch is enough


def test_limit_train_batches_that_keeps_no_batch_is_refused():
    class Trainer:
        global_rank, world_size, global_step, accumulate_grad_batches, limit_train_batches = 0, 1, 0, 1, 0.1

    with pytest.raises(ValueError, match=r"trainer.limit_train_batches=0.1 keeps none of the 5 training batches"):
        resumable_sampler(list(range(40)), seed=0, trainer=Trainer(), batch_size=8)


# ---- item 10: config values named by key ------------------------------------------------------------------------
def test_a_non_integer_trainer_option_names_the_key(tmp_path):
    result = train_refused("trainer.max_steps=abc", f"hydra.run.dir={tmp_path}")
    assert "trainer.max_steps must be an integer, got 'abc'" in result.line


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"seed": "abc"}, "seed must be an integer, got 'abc'"),
        ({"trainer": {"max_epochs": "abc"}}, "trainer.max_epochs must be an integer, got 'abc'"),
        ({"trainer": {"accumulate_grad_batches": 0}}, "trainer.accumulate_grad_batches must be >= 1, got 0"),
        ({"trainer": {"log_every_n_steps": 2.5}}, "trainer.log_every_n_steps must be an integer, got 2.5"),
        ({"trainer": {"val_check_interval": "abc"}}, "trainer.val_check_interval must be an integer (batches)"),
        ({"trainer": {"val_check_interval": 0}}, "trainer.val_check_interval must be >= 1 batches"),
        ({"trainer": {"limit_train_batches": "abc"}}, "trainer.limit_train_batches must be an integer (batches)"),
        ({"trainer": {"limit_val_batches": 1.5}}, "or a fraction in [0, 1], got 1.5"),
        ({"data": {"batch_size": "abc"}}, "data.batch_size must be an integer, got 'abc'"),
        ({"data": {"block_size": 0}}, "data.block_size must be >= 1, got 0"),
        ({"model": {"optimizer": {"lr": -1}}}, "model.optimizer.lr must be a number >= 0, got -1"),
        ({"model": {"optimizer": {"lr": "fast"}}}, "model.optimizer.lr must be a number >= 0, got 'fast'"),
    ],
)
def test_config_values_are_checked_by_key(overrides, message):
    base = {"seed": 1, "trainer": {"max_steps": 10, "val_check_interval": 5, "limit_val_batches": 2}}
    check_config(OmegaConf.create(base))  # the valid base passes
    with pytest.raises(ValueError) as refused:
        check_config(OmegaConf.merge(base, overrides))
    assert message in str(refused.value)


def test_valid_lightning_forms_pass_the_checks():
    forms = {"val_check_interval": "00:00:10:00", "limit_train_batches": 0.25, "max_epochs": None, "max_steps": -1}
    check_config(OmegaConf.create({"trainer": forms, "model": {"optimizer": {"lr": 3e-4}}}))


def test_a_negative_learning_rate_names_the_key_when_the_optimizer_is_built():
    with pytest.raises(ValueError, match=r"model.optimizer.lr must be a number >= 0, got -1"):
        build_optimizer(partial(torch.optim.AdamW, lr=-1), [torch.nn.Parameter(torch.zeros(2))])


def test_a_zero_learning_rate_is_accepted_and_leaves_the_weights_as_they_are():
    """lr=0 is a choice (measure or evaluate through the training loop without updates); only < 0 is refused."""
    base = {"trainer": {"max_steps": 10}, "model": {"optimizer": {"lr": 0}}}
    check_config(OmegaConf.create(base))
    check_config(OmegaConf.merge(base, {"model": {"optimizer": {"lr": 0.0}}}))
    with pytest.raises(ValueError, match=r"model.optimizer.lr must be a number >= 0, got -1e-05"):
        check_config(OmegaConf.merge(base, {"model": {"optimizer": {"lr": -1e-5}}}))
    weight = torch.nn.Parameter(torch.arange(4.0))
    optimizer = build_optimizer(partial(torch.optim.AdamW, lr=0, weight_decay=0.1), [weight])
    (weight**2).sum().backward()
    optimizer.step()
    assert torch.equal(weight.detach(), torch.arange(4.0))  # a real step, with a gradient and decay: no change


@pytest.mark.slow
def test_an_empty_text_file_is_named_and_gets_no_wrong_hint(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    result = run_script("train.py", "data=text_files", f"data.text_files=[{empty}]", f"hydra.run.dir={tmp_path / 'r'}")
    assert_one_line_error(result, f"{empty} is empty", "data.text_files")
    assert "hint:" not in result.stderr  # data.text_files exists: no "did you mean 'data.text_files'?"
    assert "mmap" not in result.stderr


def read_with_lm(path, tmp_path):
    LanguageModelDataModule(dataset=None, text_files=[str(path)], cache_dir=str(tmp_path / "cache")).prepare_data()


@pytest.mark.parametrize(
    "reader, key",
    [
        (read_with_lm, "data.text_files"),
        (lambda path, _: read_tsv(path, "label", None), "data.train_file"),
        (lambda path, _: read_lines(path), "a parallel corpus"),
    ],
    ids=["lm", "glue", "translation"],
)
def test_a_binary_text_file_is_named_with_the_byte_offset(tmp_path, reader, key):
    binary = tmp_path / "model.bin"
    text = b"sentence\tlabel\nO, she doth teach\t1\n"
    binary.write_bytes(text + bytes([0xD0, 0x28]) + b"rest\t0\n")
    with pytest.raises(ValueError) as refused:
        reader(binary, tmp_path)
    assert f"{binary} is not UTF-8 text (byte offset {len(text)}, line 3" in str(refused.value)
    assert key in str(refused.value)


def test_a_split_without_tokens_is_named(tmp_path):
    """One character: the 90/10 split leaves the training text empty (np.memmap: "cannot mmap an empty file")."""
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("a")
    dm = LanguageModelDataModule(dataset=None, text_files=[str(tiny)], cache_dir=str(tmp_path / "cache"))
    with pytest.raises(ValueError, match=r"the train split of .*tiny.txt has no tokens; give more text"):
        dm.setup("fit")


def test_a_missing_value_names_the_key():
    cfg = OmegaConf.create({"data": {"text_files": "???"}, "run": "${data.text_files}"})
    for key in ("data.text_files", "run"):
        with pytest.raises(Exception) as missing:
            OmegaConf.select(cfg, key, throw_on_missing=True)
        assert user_message(missing.value) == (
            "data.text_files has no value (it is ??? in the config); give one on the command line: data.text_files=..."
        )


# ---- eval.py ----------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_eval_without_ckpt_path(tmp_path):
    """As typed: the run directory is named after the checkpoint, so Hydra asks first (before eval.py runs)."""
    result = run_script("eval.py", cwd=tmp_path)
    assert_one_line_error(result, "ckpt_path", "ckpt_path=")


def test_eval_without_ckpt_path_in_a_given_run_directory(tmp_path):
    """With hydra.run.dir the start reaches the eval entry, which asks."""
    result = evaluate_refused(f"hydra.run.dir={tmp_path}", cwd=tmp_path)
    assert "ckpt_path" in result.line and "ckpt_path=" in result.line


def test_eval_of_a_gpt_checkpoint_on_images_is_refused(gpt_char_ckpt, tmp_path):
    result = evaluate_refused(f"ckpt_path={gpt_char_ckpt}", "data=mnist", f"hydra.run.dir={tmp_path}")
    assert "the checkpoint holds a gpt model for causal_lm, data=mnist is an image dataset" in result.line
    assert "class_names" not in result.line


def test_eval_on_a_data_config_as_the_readme_documents(gpt_char_ckpt, tmp_path):
    """`eval.py ckpt_path=... data=shakespeare_char`, as docs/training.md writes it: the data config interpolates
    ${seed}, which eval.yaml defines."""
    result = evaluate_in_process(
        f"ckpt_path={gpt_char_ckpt}",
        "data=shakespeare_char",
        "data.block_size=32",
        "split=val",
        "trainer.limit_val_batches=2",
        f"hydra.run.dir={tmp_path}",
    )
    assert "val/loss" in result.stdout and result.value["val/loss"] > 0


# ---- generate.py: options checked before the model loads -------------------------------------------------------
@pytest.mark.parametrize(
    "option, message",
    [
        (["--device", "tpu9"], "--device 'tpu9' is not a device generate.py runs on; use cpu, cuda, cuda:N or mps"),
        (["--temperature", "nan"], "--temperature must be a finite number >= 0 (0: greedy), got nan"),
        (["--temperature", "inf"], "--temperature must be a finite number >= 0 (0: greedy), got inf"),
        (["--temperature", "-1"], "--temperature must be a finite number >= 0 (0: greedy), got -1.0"),
        (["--top-p", "0"], "--top-p must be in (0, 1], got 0.0"),
        (["--top-k", "0"], "--top-k must be >= 1, got 0"),
    ],
)
def test_generate_options_are_checked_before_the_checkpoint_is_read(tmp_path, capsys, option, message):
    """The checkpoint does not exist: the option's error coming first shows nothing was loaded."""
    with pytest.raises(SystemExit) as stop:
        cli.generate([str(tmp_path / "missing.ckpt"), *option])
    err = capsys.readouterr().err
    assert stop.value.code == 1 and err.strip() == f"error: {message}"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_generate_on_cuda_without_a_gpu(gpt_char_ckpt, capsys):
    err = one_line_error(capsys, cli.generate, gpt_char_ckpt, "--device", "cuda")
    assert "--device cuda: this machine has no usable CUDA GPU; use --device cpu" in err


# ---- item 9: the machine says no (permissions, full disk, no network) -------------------------------------------
def as_unprivileged(command: list[str]) -> list[str]:
    """Root writes into a read-only directory anyway; without the capability to override file permissions
    (setpriv drops it) it meets them like any user. Skips where neither works."""
    if os.geteuid() != 0:
        return command
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: permissions are not enforced")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *command]


@pytest.mark.slow
def test_an_unwritable_output_directory(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    command = as_unprivileged([sys.executable, str(ROOT / "train.py"), *QUICK, f"hydra.run.dir={locked / 'run'}"])
    env = {**os.environ, "HYDRA_FULL_ERROR": "0"}
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    if "setpriv" in command[0] and result.returncode != 0 and "setpriv:" in result.stderr:
        pytest.skip(f"setpriv cannot drop capabilities here: {result.stderr.strip()}")
    assert_one_line_error(result, f"{locked / 'run'}: Permission denied; fix the permissions", "hydra.run.dir=")
    assert list(locked.iterdir()) == []


@pytest.mark.slow
def test_an_output_directory_below_a_file(tmp_path):
    """Hydra creates the run directory before the task starts: its failure is one line too."""
    (tmp_path / "file").write_text("")
    result = run_script("train.py", *QUICK, f"hydra.run.dir={tmp_path / 'file' / 'run'}")
    assert_one_line_error(result, str(tmp_path / "file" / "run"), "not a folder")


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EACCES, errno.EROFS])
def test_disk_and_permission_errors_become_one_line(capsys, code):
    def write():
        raise OSError(code, os.strerror(code), "/runs/x/checkpoints/last.ckpt")

    for guard in (one_line_errors(write, hydra_job=False), hydra_errors_in_one_line()(write)):
        with pytest.raises(SystemExit) as stop:
            guard()
        err = capsys.readouterr().err.strip()
        assert stop.value.code == 1 and err.startswith(f"error: /runs/x/checkpoints/last.ckpt: {os.strerror(code)};")
        assert "hydra.run.dir=DIR" in err and "\n" not in err


def test_a_full_disk_met_by_a_real_write(capsys):
    def save():
        with open("/dev/full", "w") as f:
            f.write("x")

    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    with pytest.raises(SystemExit):
        one_line_errors(save, hydra_job=False)()
    assert "No space left on device; the disk is full" in capsys.readouterr().err


def test_a_bug_keeps_its_traceback():
    with pytest.raises(KeyError), hydra_errors_in_one_line():
        raise KeyError("a bug")


def test_a_download_without_network_names_the_url_and_zoo_data_dir(tmp_path, monkeypatch):
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/input.txt"
    monkeypatch.setitem(DATASETS, "offline", [DatasetFile("offline/input.txt", url, "0" * 64)])
    with pytest.raises(FileNotFoundError) as refused:
        resolve_dataset("offline", tmp_path, download_missing=True)
    message = str(refused.value)
    assert url in message and "ZOO_DATA_DIR" in message and str(tmp_path / "offline" / "input.txt") in message
    assert list((tmp_path / "offline").iterdir()) == []  # no partial file left


def test_a_type_error_is_the_users_only_where_zoo_or_the_config_raised_it():
    """One-line errors are for the user's mistakes: a TypeError that zoo raises with a message (one line, also where
    the raise spans lines) or that Hydra meets calling a configured class with a key it does not take; a TypeError
    that Python raises inside zoo's code is a bug and keeps its traceback (user_message gives None)."""
    from hydra.utils import instantiate

    from zoo.callbacks.throughput_monitor import ZooThroughputMonitor
    from zoo.data.base import per_device_batch_size
    from zoo.models.bert import BERTConfig

    with pytest.raises(TypeError) as raised:
        GPT(BERTConfig())  # a one-line `raise TypeError(...)`
    assert user_message(raised.value) == "GPT needs a GPTConfig, got BERTConfig"
    with pytest.raises(TypeError) as raised:
        ZooThroughputMonitor().setup(None, L.LightningModule(), "fit")  # a raise over four lines
    assert user_message(raised.value).startswith("ZooThroughputMonitor needs a zoo task")
    with pytest.raises(Exception) as raised:
        instantiate({"_target_": "zoo.data.LanguageModelDataModule", "num_worker": 2})
    assert "num_worker" in user_message(raised.value)
    with pytest.raises(TypeError) as raised:
        per_device_batch_size("8", None)  # Python's own TypeError inside zoo ("not all arguments converted")
    assert user_message(raised.value) is None
