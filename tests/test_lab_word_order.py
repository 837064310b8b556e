"""positions_sst2's word-order probe (zoo/lab/word_order.py): a shuffled sentence holds exactly the original's tokens,
words stay whole, [CLS]/[SEP] stay put; the sweep's results carry the probe's metrics, and a model without positions
loses nothing to the shuffle (self-attention alone cannot see order)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections import Counter

import pytest
from test_lab import assert_lab_report

from zoo.data import GlueDataModule
from zoo.lab.word_order import WordOrderProbe, shuffle_words

CLS, SEP = 101, 102
CONTINUATION = {7, 8}  # "##" pieces: they stay glued to the piece before them


def test_shuffle_keeps_tokens_words_and_special_tokens():
    ids = [CLS, 1, 7, 2, 3, 8, 8, 4, SEP, 5, 6, 7, SEP]  # a sentence pair
    seen = set()
    for seed in range(20):
        out = shuffle_words(ids, CONTINUATION, {CLS, SEP}, random.Random(seed))
        assert Counter(out) == Counter(ids) and len(out) == len(ids)
        assert out[0] == CLS and out[8] == SEP and out[-1] == SEP  # segments shuffled within themselves
        first = out[1:8]
        assert first[first.index(1) + 1] == 7 and first[first.index(3) + 1 : first.index(3) + 3] == [8, 8]
        assert set(out[9:12]) == {5, 6, 7} and out[out.index(6) + 1] == 7
        seen.add(tuple(out))
    assert len(seen) > 1  # the order does change
    again = shuffle_words(ids, CONTINUATION, {CLS, SEP}, random.Random(3))
    assert again == shuffle_words(ids, CONTINUATION, {CLS, SEP}, random.Random(3))  # seeded: the same every time


def test_shuffled_dev_set_has_each_sentences_tokens(data_dir, cache_dir):
    if not (data_dir / "sst2" / "dev.tsv").is_file():
        pytest.skip(f"no SST-2 under {data_dir}")
    dm = GlueDataModule(
        max_train_rows=500, max_val_rows=40, batch_size=8, block_size=32, vocab_size=1000, pad_to="longest",
        data_dir=str(data_dir), cache_dir=str(cache_dir),
    )  # fmt: skip
    dm.setup("fit")
    ordered, shuffled = WordOrderProbe.shuffled_items(dm, seed=0)
    assert len(ordered) == len(shuffled) == 40
    for a, b in zip(ordered, shuffled):
        assert Counter(a["input_ids"]) == Counter(b["input_ids"]) and a["label"] == b["label"]
        assert b["input_ids"][0] == dm.tokenizer.cls_id and b["input_ids"][-1] == dm.tokenizer.sep_id
    assert sum(a["input_ids"] != b["input_ids"] for a, b in zip(ordered, shuffled)) > 30
    assert WordOrderProbe.shuffled_items(dm, seed=0)[1] == shuffled  # the same shuffle for every model


@pytest.mark.slow
def test_the_sweep_records_the_probe_and_no_positions_loses_nothing(data_dir, tmp_path):
    if not (data_dir / "sst2" / "dev.tsv").is_file():
        pytest.skip(f"no SST-2 under {data_dir}")
    sweep = tmp_path / "sweep"
    quick = ["positions_sst2", "--quick", "seed=1", f"hydra.sweep.dir={sweep}"]  # learned vs none, 1 seed
    command = [sys.executable, "-m", "zoo.lab", "run", *quick]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert_lab_report(sweep, min_arms=2)  # positions_sst2's quick run in the suite (see QUICK in tests/test_lab.py)
    results = sorted(sweep.glob("*/result.json"))
    assert len(results) == 2
    for path in results:
        record = json.loads(path.read_text())
        metrics = record["metrics"]
        assert {"lab/acc_ordered", "lab/acc_shuffled", "lab/order_drop"} <= set(metrics)
        assert metrics["lab/acc_ordered"] == pytest.approx(metrics["val/acc"], abs=1e-6)  # the same dev rows
        if "variant=none" in record["overrides"]:
            assert metrics["lab/order_drop"] == 0  # a bag of words: the same answers in any order
    report = (sweep / "report.md").read_text()
    assert "(`lab/order_drop`)" in report and "without positions the model is blind to word order" in report
