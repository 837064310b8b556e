"""The command-line entries `zoo-train`, `zoo-eval`, `zoo-generate`, `zoo-prepare` and `zoo-baselines` (console
scripts), which the checkout's train.py / eval.py / generate.py call too. The Hydra configs ship inside the package
(`pkg://zoo.conf`), so the commands work from any directory; runs write into `./logs` of the directory they start in.
"""

from __future__ import annotations

import atexit
import gc

import hydra
from omegaconf import DictConfig

from zoo.entry.errors import one_line_errors
from zoo.entry.override_hint import suggest_nearest_key
from zoo.entry.quiet import quiet

CONFIG_PATH = "pkg://zoo.conf"


def _skip_exit_collection() -> None:
    # The garbage collection CPython runs at shutdown walks every object torch, Lightning and transformers created:
    # about a second after a short run's last line. `gc.freeze` at exit (after the handlers the run registers)
    # skips it; CPython does not promise to run the finalizers of reference cycles at exit anyway.
    atexit.register(gc.freeze)


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="train")
@one_line_errors
def _train(cfg: DictConfig) -> float | None:
    quiet()
    from zoo.entry.train import train as run_training

    return run_training(cfg)


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="eval")
@one_line_errors
def _evaluate(cfg: DictConfig) -> dict:
    quiet()
    from zoo.entry.evaluate import evaluate as run_evaluation

    return run_evaluation(cfg)


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="prepare")
@one_line_errors
def _prepare(cfg: DictConfig) -> None:
    from zoo.entry.prepare import prepare as run_prepare

    run_prepare(cfg)


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="baselines")
@one_line_errors
def _baselines(cfg: DictConfig) -> dict:
    quiet()
    from zoo.entry.baselines import run

    return run(cfg)


def train() -> None:
    """`zoo-train [overrides...]`, e.g. `zoo-train model=gpt trainer.max_steps=500` (see zoo/conf/train.yaml)."""
    _skip_exit_collection()
    with suggest_nearest_key("train"):
        _train()


def evaluate() -> None:
    """`zoo-eval ckpt_path=.../last.ckpt split=test`."""
    _skip_exit_collection()
    with suggest_nearest_key("eval"):
        _evaluate()


def prepare() -> None:
    """`zoo-prepare data=... prepare.output_dir=DIR` (see zoo/conf/prepare.yaml)."""
    with suggest_nearest_key("prepare"):
        _prepare()


def baselines() -> None:
    """`zoo-baselines data=shakespeare_char`: n-gram losses of a text data config (zoo/conf/baselines.yaml)."""
    with suggest_nearest_key("baselines"):
        _baselines()


@one_line_errors(hydra_job=False, elsewhere="give another file, or redirect the output elsewhere")
def generate(argv: list[str] | None = None) -> None:
    """`zoo-generate CKPT --prompt "ROMEO:"` (GPT) or `zoo-generate CKPT --source "..."` (Transformer)."""
    from zoo.entry.generate import parse_args, run

    _skip_exit_collection()
    for text in run(parse_args(argv)):
        print(text)
