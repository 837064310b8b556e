"""positions_sst2's word-order probe (zoo/lab/probes/word_order.py): a shuffled sentence holds exactly the original's
tokens, words stay whole, [CLS]/[SEP] stay put; the jobs' results carry the probe's metrics, and a model without
positions loses nothing to the shuffle (self-attention alone cannot see order)."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from lab_sweeps import quick_job, sweep_of_copies
from test_lab import assert_lab_report

from zoo.data import GlueDataModule
from zoo.lab.probes.word_order import WordOrderProbe, shuffle_words
from zoo.lab.report.report import write_report

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
@pytest.mark.lab
def test_the_jobs_record_the_probe_and_no_positions_loses_nothing(data_dir, tmp_path):
    if not (data_dir / "sst2" / "dev.tsv").is_file():
        pytest.skip(f"no SST-2 under {data_dir}")
    # the quick grid of seed 1, learned positions vs none: each job run by itself (tests/lab_sweeps.py)
    runs = {variant: tmp_path / variant for variant in ("learned", "none")}
    for variant, run_dir in runs.items():
        metrics = quick_job("positions_sst2", run_dir, variant=variant)["metrics"]
        assert {"lab/acc_ordered", "lab/acc_shuffled", "lab/order_drop"} <= set(metrics)
        assert metrics["lab/acc_ordered"] == pytest.approx(metrics["val/acc"], abs=1e-6)  # the same dev rows
        if variant == "none":
            assert metrics["lab/order_drop"] == 0  # a bag of words: the same answers in any order
    sweep = sweep_of_copies(list(runs.values()), tmp_path / "sweep", "seed=1")  # the two jobs as their sweep
    write_report(sweep)
    assert_lab_report(sweep, min_arms=2)  # positions_sst2's jobs in the suite (see QUICK in tests/test_lab.py)
    assert len(list(sweep.glob("*/result.json"))) == 2
    report = (sweep / "report.md").read_text()
    assert "(`lab/order_drop`)" in report and "without positions the model is blind to word order" in report
