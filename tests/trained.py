"""Runs of the entries in the test process, and the models trained once per test session that the tests share.

`train_in_process(*overrides)` / `evaluate_in_process(*overrides)` compose zoo/conf/train.yaml (eval.yaml) with
Hydra's compose API as `python train.py overrides...` composes it, set up the job as Hydra's `run_job` does (the
run directory, HydraConfig, the job's logging: the console lines and the run's log file) and call
`zoo.entry.train.train(cfg)` / `zoo.entry.evaluate.evaluate(cfg)` here, as lightning-hydra-template's tests do. What a
process would leave behind in this one is put back afterwards: Hydra's global state, the logging set-up, the
environment (Lightning's PL_GLOBAL_SEED), torch's global flags and random generators, warning filters, the start
directory, and the run-directory claims of zoo.entry.run_lock. The result holds the run's stdout and stderr (its log
lines, progress bar and warnings) as a process's would. A user error is raised as the exception the entry raised;
`zoo.entry.errors.user_message(error)` is the one line the script would print for it.

The run that a test reads without changing it comes from a session fixture below (trained once, shared by every file
that needs that kind of model); a test that changes a run directory copies it first (`copy_run`).

Real processes (`conftest.run_script`) remain where the process is the point: the one-line error format and exit
status of each script, signals, multiruns (`-m`), concurrent starts and the README's commands.
"""

from __future__ import annotations

import contextlib
import copy
import io
import logging
import os
import random
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import QUIET_SHORT_RUN, ROOT, assert_ok, run_script

CONF = ROOT / "zoo" / "conf"


@dataclass
class InProcessRun:
    """What a run of an entry in this process gave: `value` (what train()/evaluate() returned), its output, and
    `returncode` 0 so that conftest.assert_ok reads it like a finished process. For a refused start (`train_refused`,
    `evaluate_refused`): `error`, and `line`, the one line the script prints for it (`error: <line>`, exit 1)."""

    run_dir: Path | None
    value: Any
    stdout: str
    stderr: str
    returncode: int = 0
    error: BaseException | None = None

    @property
    def line(self) -> str:
        from zoo.entry.errors import user_message

        return user_message(self.error)


def train_in_process(*overrides: str, cwd: Path | None = None, env: dict | None = None) -> InProcessRun:
    """`python train.py *overrides` in this process (see the module docstring); an error is raised."""
    from zoo.entry.train import train

    return _run_entry("train", train, overrides, cwd=cwd, env=env)


def evaluate_in_process(*overrides: str, cwd: Path | None = None, env: dict | None = None) -> InProcessRun:
    """`python eval.py *overrides` in this process."""
    from zoo.entry.evaluate import evaluate

    return _run_entry("eval", evaluate, overrides, cwd=cwd, env=env)


def train_refused(*overrides: str, cwd: Path | None = None, env: dict | None = None) -> InProcessRun:
    """`python train.py *overrides` in this process, which must stop with a user error: the result holds the error,
    its one line (`line`: what train.py prints after `error: `) and the output before it. A bug (an error that
    keeps its traceback in the script: zoo.entry.errors.user_message gives None) fails the test."""
    from zoo.entry.train import train

    return _refused("train", train, overrides, cwd=cwd, env=env)


def evaluate_refused(*overrides: str, cwd: Path | None = None, env: dict | None = None) -> InProcessRun:
    """`python eval.py *overrides` in this process, which must stop with a user error (see train_refused)."""
    from zoo.entry.evaluate import evaluate

    return _refused("eval", evaluate, overrides, cwd=cwd, env=env)


def _refused(config_name: str, entry, overrides, **kwargs) -> InProcessRun:
    result = _run_entry(config_name, entry, overrides, catch=True, **kwargs)
    if result.error is None:
        pytest.fail(f"{config_name} {' '.join(overrides)} was not refused:\n{result.stdout[-3000:]}")
    if result.line is None:
        raise result.error  # a bug: its traceback
    assert "\n" not in result.line, result.line
    return result


def compose_entry(config_name: str, overrides) -> Any:
    """The config (with its `hydra` node) that `python <config_name>.py overrides...` composes."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name=config_name, overrides=list(overrides), return_hydra_config=True)


def _run_entry(
    config_name: str, entry, overrides, *, cwd: Path | None, env: dict | None, catch: bool = False
) -> InProcessRun:
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.utils import _flush_loggers, configure_log
    from omegaconf import OmegaConf, open_dict, read_write

    out, err = io.StringIO(), io.StringIO()
    state = _ProcessState()
    run_dir, value, caught_error = None, None, None
    try:
        with (
            contextlib.chdir(cwd or os.getcwd()),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
            warnings.catch_warnings(record=True) as caught,
        ):
            # A fresh interpreter's warning filters (Python's defaults; DeprecationWarning only from __main__).
            warnings.resetwarnings()
            warnings.simplefilter("default")
            for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
                warnings.filterwarnings("ignore", category=category)
            os.environ.update({"HYDRA_FULL_ERROR": "0", **(env or {})})
            try:
                # As Hydra's run_job: the job's directory from hydra.run.dir (zoo.run_dir claims or finds it), then
                # HydraConfig, the task's config without its `hydra` node, the directory and the job's logging.
                cfg = compose_entry(config_name, overrides)
                HydraConfig.instance().set_config(cfg)
                run_dir = Path(os.path.abspath(str(OmegaConf.select(cfg, "hydra.run.dir"))))
                with read_write(cfg.hydra.runtime), open_dict(cfg.hydra.runtime):
                    cfg.hydra.runtime.output_dir = str(run_dir)
                HydraConfig.instance().set_config(cfg)
                task_cfg = copy.deepcopy(cfg)
                with read_write(task_cfg), open_dict(task_cfg):
                    del task_cfg["hydra"]
                run_dir.mkdir(parents=True, exist_ok=True)
                configure_log(cfg.hydra.job_logging, cfg.hydra.verbose)
                value = entry(task_cfg)
                _flush_loggers()
            finally:
                for record in caught:
                    err.write(warnings.formatwarning(record.message, record.category, record.filename, record.lineno))
    except Exception as error:
        if not catch:
            error.add_note(f"in-process {config_name} {' '.join(overrides)}\nSTDOUT:\n{out.getvalue()[-3000:]}")
            error.add_note(f"STDERR:\n{err.getvalue()[-3000:]}")
            raise
        caught_error = error
    finally:
        state.restore()
        GlobalHydra.instance().clear()
        HydraConfig.instance().cfg = None
    return InProcessRun(run_dir, value, out.getvalue(), err.getvalue(), error=caught_error)


class _ProcessState:
    """What a run changes in its process and a process's end would drop: saved at creation, put back by
    `restore()`."""

    def __init__(self) -> None:
        import numpy as np
        import torch

        from zoo.callbacks import phase_times

        self.environ = dict(os.environ)
        self.loggers = {
            name: (logger.handlers[:], logger.level, logger.propagate, logger.disabled, logger.filters[:])
            for name, logger in [("", logging.getLogger()), *logging.Logger.manager.loggerDict.items()]
            if isinstance(logger, logging.Logger)
        }
        self.torch = (
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
            torch.get_num_threads(),
            torch.backends.cudnn.deterministic,
            torch.backends.cudnn.benchmark,
        )
        self.rng = (random.getstate(), np.random.get_state(), torch.get_rng_state())
        from lightning.pytorch.utilities import rank_zero_only

        self.rank = getattr(rank_zero_only, "rank", 0)  # Lightning's rank_zero_only: 0 in a single process
        # Each run stands for a process of its own: its start-up is counted as the first job's of a process.
        self.job_starts = phase_times._job_starts[:]
        phase_times._job_starts.clear()

    def restore(self) -> None:
        import numpy as np
        import torch

        from zoo.callbacks import phase_times
        from zoo.entry import run_lock

        # The claims of directories a process keeps until it ends (its exit removes the empty ones).
        run_lock._release_unused_claims()
        run_lock._claimed.clear()
        run_lock._created_parents.clear()
        phase_times._job_starts[:] = self.job_starts
        root = logging.getLogger()
        for handler in root.handlers:  # the job's console and log file
            if handler not in self.loggers[""][0]:
                handler.close()
        for name, (handlers, level, propagate, disabled, filters) in self.loggers.items():
            logger = logging.getLogger(name or None)
            logger.handlers[:], logger.filters[:] = handlers, filters
            logger.level, logger.propagate, logger.disabled = level, propagate, disabled
        for name, logger in logging.Logger.manager.loggerDict.items():  # created by the run
            if isinstance(logger, logging.Logger) and name not in self.loggers:
                logger.handlers.clear()
        deterministic, warn_only, threads, cudnn_deterministic, cudnn_benchmark = self.torch
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
        torch.set_num_threads(threads)
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = cudnn_deterministic, cudnn_benchmark
        random.setstate(self.rng[0])
        np.random.set_state(self.rng[1])
        torch.set_rng_state(self.rng[2])
        from lightning.pytorch.utilities import rank_zero_only

        rank_zero_only.rank = self.rank
        os.environ.clear()
        os.environ.update(self.environ)


def copy_run(run_dir: Path, target: Path) -> Path:
    """A copy of a shared run directory, for a test that writes into it."""
    shutil.copytree(run_dir, target)
    return target


def snapshot(directory: Path) -> dict[str, bytes | None]:
    """Every file and folder under `directory` with its bytes (None for a folder)."""
    return {
        str(p.relative_to(directory)): (p.read_bytes() if p.is_file() else None) for p in sorted(directory.rglob("*"))
    }


def one_line_error(capsys, command, *argv) -> str:
    """An argparse entry (zoo.entry.cli.generate, zoo.entry.export.main) run here as its script runs it: exit status
    1 and one `error:` line on stderr; returns that line."""
    with pytest.raises(SystemExit) as stop:
        command([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 1 and err.startswith("error: ") and "\n" not in err, err
    return err


# ---- the models trained once per session ------------------------------------------------------------------------
# nanoGPT's CPU recipe for tiny shakespeare (characters; gpt-mini: 4 layers, n_embd 128, context 64), 20 steps, then
# the validation pass (with its two samples) and the test pass, each cut to 2 batches. Tiny shakespeare ships in the
# package: the same run with or without a data directory.
GPT_CHAR_RUN = [
    "experiment=gpt_shakespeare_char",
    "trainer.max_steps=20",
    "trainer.limit_val_batches=2",
    "++trainer.limit_test_batches=2",
]
# A few steps of each other family's recipe on small data, with validation (and test where the recipe tests).
SHORT = ["trainer.max_steps=3", "trainer.val_check_interval=3", "trainer.limit_val_batches=2"]
BERT_MLM_RUN = [
    "experiment=bert_pretrain_wikitext2",
    *SHORT,
    "trainer.log_every_n_steps=1",
    "callbacks.progress_bar=null",
    "data.max_documents=12",
    "data.dupe_factor=1",
    "data.batch_size=8",
    "test=false",
]
# SST-2 from scratch; rows cut to 24 tokens, fewer than the model's position rows (what an export must declare).
SST2_RUN = [
    "experiment=bert_sst2",
    *SHORT,
    "trainer.log_every_n_steps=1",
    "callbacks.progress_bar=null",
    "data.max_train_rows=400",
    "data.max_val_rows=64",
    "data.batch_size=8",
    "data.vocab_size=800",
    "data.block_size=24",
]
# The tuned ViT recipe; its 8000/1000/1000 of the 10k images as fractions: the same split there, and a split of the
# fixtures.
VIT_RUN = [
    "experiment=vit_mnist",
    *SHORT,
    "++trainer.limit_test_batches=2",
    "trainer.log_every_n_steps=1",
    "data.split_sizes=[0.8,0.1,0.1]",
]
# The 2017 Transformer's CPU recipe on Multi30k, evaluation cut down: 2 val batches with greedy BLEU, 1 test batch
# with a beam of 2, translations of at most source length + 3 tokens.
TRANSFORMER_RUN = [
    "experiment=transformer_multi30k",
    "trainer.max_steps=3",
    "trainer.limit_val_batches=2",
    "+trainer.limit_test_batches=1",
    "data.max_tokens=512",
    "model.test_beam_size=2",
    "model.max_len_b=3",
    "trainer.log_every_n_steps=1",
]


def _trained(tmp_path_factory, name: str, overrides: list[str]) -> Path:
    folder = tmp_path_factory.mktemp(name)
    return train_in_process(*overrides, f"hydra.run.dir={folder / 'run'}", cwd=folder).run_dir


@pytest.fixture(scope="session")
def gpt_char_run(tmp_path_factory) -> Path:
    """The run directory of GPT_CHAR_RUN: checkpoints, csv/, result.json, timings.json, .hydra/. Read only: copy it
    (copy_run) to change it."""
    return _trained(tmp_path_factory, "gpt_char", GPT_CHAR_RUN)


@pytest.fixture(scope="session")
def gpt_char_ckpt(gpt_char_run) -> str:
    return str(gpt_char_run / "checkpoints" / "last.ckpt")


@pytest.fixture(scope="session")
def gpt_bpe_ckpt(tmp_path_factory) -> str:
    """gpt-nano on tiny shakespeare with a 512-token byte-level BPE trained on it (context 32), 2 steps."""
    overrides = [*QUIET_SHORT_RUN, "trainer.max_steps=2", "optimized_metric=null", "model.net.name=gpt-nano"]
    data = ["data=shakespeare_bpe", "data.bpe_vocab_size=512", "data.block_size=32", "data.batch_size=4", "seed=0"]
    return str(_trained(tmp_path_factory, "gpt_bpe", [*overrides, *data]) / "checkpoints" / "last.ckpt")


@pytest.fixture(scope="session")
def bert_mlm_run(tmp_path_factory, data_dir) -> Path:
    """BERT MLM+NSP pretraining (bert-mini, WikiText-2 documents), 3 steps and validation."""
    return _trained(tmp_path_factory, "bert_mlm", BERT_MLM_RUN)


@pytest.fixture(scope="session")
def sst2_run(tmp_path_factory, data_dir) -> Path:
    """A BERT classifier trained from scratch on SST-2 rows (bert-mini, 24-token rows), 3 steps and validation."""
    return _trained(tmp_path_factory, "bert_sst2", SST2_RUN)


@pytest.fixture(scope="session")
def vit_run(tmp_path_factory, data_dir) -> Path:
    """The tuned ViT recipe on MNIST for three steps: fit, validation with pictures, test, checkpoint."""
    return _trained(tmp_path_factory, "vit_mnist", VIT_RUN)


@pytest.fixture(scope="session")
def transformer_run(tmp_path_factory, data_dir) -> Path:
    """The Transformer recipe on Multi30k for three steps, validation with BLEU and translations, a test batch."""
    return _trained(tmp_path_factory, "transformer_multi30k", TRANSFORMER_RUN)


# ---- a run resumed in place, as a user resumes it ---------------------------------------------------------------
RESUMED_BASE = [
    "logger=many_loggers",
    "trainer.val_check_interval=3",
    "trainer.limit_val_batches=1",
    "trainer.log_every_n_steps=1",
    "validate=false",
    "test=false",
    "model.sample_tokens=20",
    "callbacks.progress_bar=null",
]


@dataclass
class ResumedRun:
    run: Path  # the run directory, after both starts
    before: dict  # what it held after the first start (snapshot)
    common: list[str]  # the overrides both starts were given (besides trainer.max_steps and ckpt_path=last)
    task_name: str


@pytest.fixture(scope="session")
def resumed_run(tmp_path_factory) -> ResumedRun:
    """train.py for 6 steps, then `ckpt_path=last` to 12: the second start finds the run (zoo.run_dir) and continues
    it in its directory. Two processes, as a user runs them (the wandb logger offline among the loggers)."""
    logs = tmp_path_factory.mktemp("resumed") / "logs"
    common = [*RESUMED_BASE, f"paths.log_dir={logs}", "task_name=resumed"]
    assert_ok(run_script("train.py", *common, "trainer.max_steps=6", env={"WANDB_MODE": "offline"}))
    (run,) = (logs / "resumed" / "runs").iterdir()
    before = snapshot(run)
    second = run_script("train.py", *common, "trainer.max_steps=12", "ckpt_path=last", env={"WANDB_MODE": "offline"})
    assert_ok(second)
    assert list((logs / "resumed" / "runs").iterdir()) == [run]  # no second directory
    return ResumedRun(run, before, common, "resumed")
