"""The end-of-sweep summary names every parameter the sweep was given, also one given a single value (issue 44)."""

from __future__ import annotations

import json

from omegaconf import OmegaConf

from zoo.entry.sweep_summary import SweepSummary


def _job(sweep, number: int, overrides: list[str], value: float) -> None:
    """What a finished multirun job leaves: result.json in its directory (zoo.entry.train.save_result)."""
    (sweep / str(number)).mkdir(parents=True)
    record = {"job": number, "metric": "val/loss", "value": value, "overrides": overrides}
    (sweep / str(number) / "result.json").write_text(json.dumps(record, indent=2) + "\n")


def _table(sweep) -> list[list[str]]:
    lines = [line for line in (sweep / "summary.md").read_text().splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]


def test_a_parameter_swept_with_one_value_is_a_column(tmp_path):
    """`train.py -m model.optimizer.lr=1e-3 seed=1,2`: lr took one value, and is in the table beside seed."""
    sweep = tmp_path / "multirun"
    _job(sweep, 0, ["model.optimizer.lr=1e-3", "seed=1"], 2.5)
    _job(sweep, 1, ["model.optimizer.lr=1e-3", "seed=2"], 2.25)
    config = OmegaConf.create(
        {"hydra": {"sweep": {"dir": str(sweep)}, "overrides": {"task": ["model.optimizer.lr=1e-3", "seed=1,2"]}}}
    )
    SweepSummary().on_multirun_end(config)  # what Hydra calls when the multirun ends
    assert _table(sweep) == [
        ["job", "model.optimizer.lr", "seed", "val/loss"],
        ["0", "1e-3", "1", "2.5"],
        ["1", "1e-3", "2", "2.25"],
    ]
    assert (sweep / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_sweepers_own_parameters_are_columns_too(tmp_path):
    """Optuna's search space (hydra.sweeper.params) is given in a config, not on the command line; a parameter whose
    trials all drew one value is still a column, and a key only one job has is shown empty for the others."""
    sweep = tmp_path / "optuna"
    _job(sweep, 0, ["model.net.dropout=0.1", "model.optimizer.lr=0.002"], 2.0)
    _job(sweep, 1, ["model.net.dropout=0.1", "model.optimizer.lr=0.004", "+extra=1"], 1.5)
    params = {"model.net.dropout": "choice(0.1)", "model.optimizer.lr": "interval(1e-4, 1e-2)"}
    config = OmegaConf.create(
        {"hydra": {"sweep": {"dir": str(sweep)}, "overrides": {"task": []}, "sweeper": {"params": params}}}
    )
    SweepSummary().on_multirun_end(config)
    assert _table(sweep) == [
        ["job", "+extra", "model.net.dropout", "model.optimizer.lr", "val/loss"],
        ["0", "", "0.1", "0.002", "2"],
        ["1", "1", "0.1", "0.004", "1.5"],
    ]
