"""What the dashboards receive, read back with their own readers (a run resumed in place by train.py, shared with
tests/test_resume_history.py); resume errors (the train entry in this process)."""

from __future__ import annotations

import pytest
import torch
from trained import train_refused

RESUMED_STEPS = 12  # the session's resumed run (tests/trained.py, resumed_run): 6 steps, then resumed to 12


@pytest.fixture(scope="module")
def resumed_dir(resumed_run):
    """Train 6 steps, then `ckpt_path=last` to 12: the second run continues the first in its directory (train.py
    run twice, with the csv, tensorboard and wandb loggers; tests/trained.py). Read only."""
    return resumed_run.run


@pytest.mark.slow
def test_resume_last_continues_in_place(resumed_dir):
    assert torch.load(resumed_dir / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == RESUMED_STEPS


@pytest.mark.slow
def test_tensorboard_events_hold_the_scalars(resumed_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    steps: dict[str, set[int]] = {}
    for events in (resumed_dir / "tensorboard").rglob("events.out.tfevents.*"):
        accumulator = EventAccumulator(str(events))
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            steps.setdefault(tag, set()).update(e.step for e in accumulator.Scalars(tag))
    assert {"train/loss", "val/loss", "train/tokens_per_sec", "train/mfu"} <= set(steps)
    assert steps["train/loss"] == set(range(RESUMED_STEPS))  # both halves, every step once
    assert any(t.startswith("lr-") for t in steps)


def wandb_records(path):
    """The protobuf records of a .wandb file: wandb's 7-byte header, then LevelDB-log framing (32 KiB blocks of
    [crc32c:4][length:2][type:1] chunks; type 1 full, 2 first, 3 middle, 4 last), parsed with wandb's own
    Record message."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    position, pending = 7, b""
    while position + 7 <= len(data):
        block_left = 32768 - position % 32768
        if block_left < 7:  # a block's tail too short for a header is padding
            position += block_left
            continue
        length = int.from_bytes(data[position + 4 : position + 6], "little")
        kind = data[position + 6]
        chunk = data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind == 0 and length == 0:
            continue
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            yield record


@pytest.mark.slow
def test_wandb_offline_run_holds_config_and_history(resumed_dir):
    run_id = (resumed_dir / "wandb_run_id").read_text().strip()
    offline = sorted((resumed_dir / "wandb").glob("offline-run-*"))
    assert len(offline) == 2 and all(d.name.endswith(run_id) for d in offline)  # one wandb run, resumed
    config_keys, history_keys = set(), set()
    for record in wandb_records(offline[0] / f"run-{run_id}.wandb"):
        kind = record.WhichOneof("record_type")
        if kind == "config":
            config_keys.update(item.key for item in record.config.update)
        elif kind == "history":
            history_keys.update(item.key or "/".join(item.nested_key) for item in record.history.item)
    assert {"model", "data", "trainer", "params/total"} <= config_keys
    assert {"train/loss", "val/loss", "train/mfu"} <= history_keys


def test_resume_errors_are_one_line(tmp_path):
    junk = tmp_path / "junk.ckpt"
    junk.write_bytes(b"\x00" * 100)
    for ckpt, fragment in [(tmp_path / "missing.ckpt", "checkpoint not found"), (junk, "not a readable checkpoint")]:
        assert fragment in train_refused(f"ckpt_path={ckpt}", f"hydra.run.dir={tmp_path / 'r'}").line
    assert junk.read_bytes() == b"\x00" * 100  # left as it was
    assert "no earlier run" in train_refused("ckpt_path=last", f"paths.log_dir={tmp_path / 'empty'}").line
