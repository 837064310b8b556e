"""The recall tasks (zoo/data/recall.py): every scored target is given earlier in its sequence and nowhere else, the
splits are fixed by split_seed, bad options are one-line errors, and a small GPT learns the induction task far above
chance in seconds (a count of the training data cannot: every sequence is drawn anew)."""

from __future__ import annotations

import json

import pytest
import torch
from trained import train_in_process

from zoo.data.recall import IGNORE, RecallDataModule, draw

SIZES = {"num_pairs": 8, "num_queries": 5, "num_keys": 20, "num_values": 30}


def test_each_query_asks_a_key_of_its_sequence_and_its_target_is_that_keys_value():
    tokens, targets = draw("mqar", 50, **SIZES, seed=1)
    assert tokens.shape == targets.shape == (50, 2 * 8 + 2 * 5)
    for row, target in zip(tokens.tolist(), targets.tolist()):
        keys, values = row[0:16:2], row[1:16:2]
        assert len(set(keys)) == 8 and all(k < 20 for k in keys) and all(20 <= v < 50 for v in values)
        pairs = dict(zip(keys, values))
        scored = [i for i, t in enumerate(target) if t != IGNORE]
        assert scored == list(range(16, 26, 2))  # the queried keys, each predicting the token after it
        for i in scored:
            assert row[i] in pairs and target[i] == pairs[row[i]] == row[i + 1]
        assert len({row[i] for i in scored}) == 5  # distinct keys asked


def test_the_copy_task_scores_the_second_copy_after_its_first_token():
    tokens, targets = draw("copy", 10, **SIZES, seed=1)
    assert torch.equal(tokens[:, :8], tokens[:, 8:])
    assert (targets[:, :8] == IGNORE).all() and (targets[:, 15] == IGNORE).all()
    assert torch.equal(targets[:, 8:15], tokens[:, 9:16])  # position t predicts token t + 1 of the copy


def test_the_splits_are_fixed_by_split_seed_and_differ_from_each_other():
    def splits(split_seed: int) -> dict:
        data = RecallDataModule(**SIZES, num_train=64, num_val=32, num_test=32, split_seed=split_seed)
        data.build_splits()
        return {s: data._splits[s].tensors[0] for s in ("train", "val", "test")}

    first, again, other = splits(0), splits(0), splits(1)
    assert all(torch.equal(first[s], again[s]) for s in first)
    assert not torch.equal(first["val"], first["test"][:32]) and not torch.equal(first["val"], other["val"])
    data = RecallDataModule(**SIZES)
    assert data.model_fields == {"vocab_size": 50, "block_size": 26}


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"kind": "sort"}, "data.kind must be one of mqar, copy"),
        ({"num_queries": 9}, "0 < data.num_queries <= data.num_pairs <= data.num_keys"),
        ({"num_pairs": 0}, "data.num_pairs must be a positive integer"),
    ],
)
def test_bad_options_are_one_line_errors(options, says):
    with pytest.raises(ValueError, match=says):
        RecallDataModule(**{**SIZES, **options})


def test_a_small_gpt_learns_the_induction_task_far_above_chance(tmp_path):
    run = train_in_process(
        "experiment=gpt_induction",
        "data.num_pairs=8",
        "data.num_train=4000",
        "data.num_val=500",
        "trainer.max_steps=300",
        "trainer.val_check_interval=300",
        "test=true",
        "callbacks.progress_bar=null",
        f"hydra.run.dir={tmp_path}",
    )
    metrics = json.loads((tmp_path / "result.json").read_text())["metrics"]
    chance = 1 / 128
    assert run.value == metrics["val/acc"] > 50 * chance, metrics  # copied from the first half, not counted
    assert metrics["test/acc"] > 50 * chance and metrics["val/ppl"] < 128


def test_with_a_gap_the_copies_stand_at_a_distance_that_varies_and_the_second_ends_the_sequence():
    tokens, targets = draw("copy", 200, **SIZES, seed=3, gap=6)
    assert tokens.shape == (200, 2 * 8 + 6)
    copy = tokens[:, -8:]
    starts = set()
    for row, second in zip(tokens.tolist(), copy.tolist()):
        found = [s for s in range(7) if row[s : s + 8] == second]
        assert found, "the first copy stands within the gap's reach"
        starts.add(found[0])
    assert starts == set(range(7))  # every distance from 8 to 14 occurs: no fixed offset finds the copy
    assert torch.equal(targets[:, 14:21], tokens[:, 15:22]) and (targets[:, :14] == IGNORE).all()
    assert RecallDataModule(**SIZES, kind="copy", gap=6).model_fields["block_size"] == 22
    with pytest.raises(ValueError, match="data.gap must be a whole number >= 0, and 0 unless data.kind=copy"):
        RecallDataModule(**SIZES, gap=4)  # mqar
