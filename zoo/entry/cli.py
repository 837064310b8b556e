"""The command-line entries: `zoo-train`, `zoo-eval` and `zoo-generate` (console scripts), which the checkout's
train.py / eval.py / generate.py call too.

The Hydra configs ship inside the package (`zoo/conf`), so the commands work from any directory after a plain
`pip install .`; runs write into `./logs` of the directory they are started from.
"""

from __future__ import annotations

import atexit
import gc

import hydra
from omegaconf import DictConfig

from zoo.entry.errors import one_line_errors
from zoo.entry.override_hint import suggest_nearest_key
from zoo.entry.quiet import quiet

# Hydra's package source: the configs are found through the installed `zoo` package, not a path beside a script.
CONFIG_PATH = "pkg://zoo.conf"


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


def prepare() -> None:
    """`zoo-prepare data=... prepare.output_dir=DIR` (see zoo/conf/prepare.yaml)."""
    with suggest_nearest_key("prepare"):
        _prepare()


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="baselines")
@one_line_errors
def _baselines(cfg: DictConfig) -> dict:
    quiet()
    from zoo.entry.baselines import run

    return run(cfg)


def baselines() -> None:
    """`zoo-baselines data=shakespeare_char`: count n-gram losses of a text data config (zoo/conf/baselines.yaml)."""
    with suggest_nearest_key("baselines"):
        _baselines()


def _skip_exit_collection() -> None:
    """Spare the process the garbage collection CPython runs while it shuts down.

    That pass walks every object the imports created (torch, Lightning, torchmetrics, transformers): about a
    second after a short run's last line. `gc.freeze` at exit takes those objects out of its reach; nothing is
    skipped but the collection of reference cycles, whose finalizers CPython does not promise to run at exit
    anyway. Registered as the command starts, it runs after the handlers the run registers (a logger's final
    upload, for one); logging's flush and the checkpoints, already closed, do not depend on it.
    """
    atexit.register(gc.freeze)


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


@one_line_errors(hydra_job=False, elsewhere="give another file, or redirect the output elsewhere")
def generate(argv: list[str] | None = None) -> None:
    """`zoo-generate CKPT --prompt "ROMEO:"` (GPT) or `zoo-generate CKPT --source "..."` (Transformer)."""
    from zoo.entry.generate import parse_args, run

    _skip_exit_collection()

    for text in run(parse_args(argv)):
        print(text)
