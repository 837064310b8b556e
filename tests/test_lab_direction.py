"""The lab's `direction` question (issue 26): a character tagging rule whose labels need the right context, its data
and task, the left-context count taggers it is judged against, and a job with the report of its quick grid, with and
without the full data."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from lab_sweeps import quick_job, sweep_of_copies
from test_lab import assert_lab_report

from zoo.data.char_tagging import CharTaggingDataModule, TagWindows
from zoo.data.char_tags import IGNORE, char_kinds, tags_in_window, word_end_tags
from zoo.data.tokenizer import CharTokenizer
from zoo.lab.decide.tag_baselines import TaggedPositions, count_taggers, window_positions
from zoo.lab.report.report import write_report
from zoo.models import BERT
from zoo.tasks import TokenTaggingTask

from conftest import FIXTURES, ROOT

I = IGNORE  # noqa: E741 (a one-letter name keeps the expected rows aligned with the text)


def tag(text: str, vocabulary: str | None = None) -> tuple[list[int], list[int]]:
    tokenizer = CharTokenizer.train(vocabulary or text)
    tags, reach = word_end_tags(np.array(tokenizer.encode(text)), char_kinds(tokenizer.chars))
    return tags.tolist(), reach.tolist()


def test_the_rule_tags_each_letter_by_how_its_word_ends():
    tags, reach = tag("be, or not.\nay")
    #        b  e  ,  _  o  r  _  n  o  t  .  \n a  y
    assert tags == [1, 1, I, I, 0, 0, I, 1, 1, 1, I, I, I, I]  # "ay" runs to the end of the text: no tag
    assert reach == [2, 1, 0, 0, 2, 1, 0, 3, 2, 1, 0, 0, 0, 0]
    assert tag("o'er the\nhill")[0][:8] == [1, I, 0, 0, I, 0, 0, 0]  # an apostrophe ends a word; a line break is space


def test_the_labels_need_the_right_context():
    """The same left context, different tags: no model reading only the left can get both right."""
    plain, comma = tag("the cat sat", "the cat, sat"), tag("the cat, sat")
    assert "the cat sat"[:7] == "the cat, sat"[:7]
    assert plain[0][4:7] == [0, 0, 0] and comma[0][4:7] == [1, 1, 1]


def test_a_window_drops_the_tags_decided_beyond_its_end():
    tags, reach = tag("to be, or")
    assert tags_in_window(np.array(tags[:5]), np.array(reach[:5])).tolist() == [0, 0, I, I, I]  # "be" ends at ","
    assert tags_in_window(np.array(tags[:6]), np.array(reach[:6])).tolist() == [0, 0, I, 1, 1, I]


def test_the_count_taggers_on_known_text():
    train, val = "ab ab ab ab, xb.", "xb ab."
    tokenizer = CharTokenizer.train(train + val)
    kinds = char_kinds(tokenizer.chars)
    train_ids, val_ids = np.array(tokenizer.encode(train)), np.array(tokenizer.encode(val))
    train_tags, _ = word_end_tags(train_ids, kinds)  # tags 0 (whitespace) six times, 1 four times
    val_tags, val_reach = word_end_tags(val_ids, kinds)
    assert val_tags.tolist() == [0, 0, I, 1, 1, I]
    scored = window_positions(val_tags, val_reach, np.array([0]), block_size=6)
    assert scored.index.tolist() == [0, 1, 3, 4] and scored.history.tolist() == [1, 2, 4, 5]
    result = count_taggers(train_ids, train_tags, val_ids, scored, tokenizer.vocab_size, orders=2)
    # Majority 0: right on x, b of "xb". Order 1: x -> 1 (its one count), a -> 0 (3:1), b -> 0 (3:2): right on b only.
    # Order 2: "xb" -> 1, " a" -> 0, "ab" -> 0 (3:1): all four wrong.
    assert (result.majority, result.by_order, result.scored) == (0.5, {1: 0.25, 2: 0.0}, 4)
    # A window starting at the b of "xb": its context "xb" is outside the window, so order 2 backs off to "b" -> 0.
    alone = TaggedPositions(np.array([1]), np.array([1]), np.array([0]))
    assert count_taggers(train_ids, train_tags, val_ids, alone, tokenizer.vocab_size, orders=2).by_order[2] == 1.0


def test_the_data_serves_windows_with_the_rule_s_tags_and_a_padding_id_no_character_uses(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("Now is the winter of our discontent, made glorious summer.\nBy this sun of York!\n" * 40)
    data = CharTaggingDataModule(dataset=None, text_files=[str(text)], block_size=16, batch_size=4, cache_dir=tmp_path)
    data.build_splits()
    characters = data.tokenizer.vocab_size
    assert data.model_fields == {"vocab_size": characters + 1, "pad_token_id": characters}
    assert data.task_inputs["num_tags"] == 2
    windows = data.eval_dataset("val")
    assert isinstance(windows, TagWindows)
    ids, tags = windows[3]
    start = int(windows.starts[3])
    full_tags, full_reach = word_end_tags(np.asarray(data.tokens("val")), char_kinds(data.tokenizer.chars))
    expected = tags_in_window(full_tags[start : start + 16], full_reach[start : start + 16])
    assert ids.tolist() == list(data.tokens("val")[start : start + 16]) and tags.tolist() == expected.tolist()
    with pytest.raises(ValueError, match="data.tokenizer=char"):
        CharTaggingDataModule(tokenizer="bpe")


@pytest.mark.filterwarnings("ignore:You are trying to `self.log\\(\\)`")  # a step called by hand, outside a Trainer
def test_the_task_tags_every_token_and_refuses_an_encoder_with_a_head():
    torch.manual_seed(0)
    with pytest.raises(ValueError, match="head='none'"):
        TokenTaggingTask(BERT.from_preset("bert-tiny", vocab_size=12, head="classification"), num_tags=2)
    for causal in (False, True):
        net = BERT.from_preset("bert-tiny", vocab_size=12, head="none", causal=causal)
        task = TokenTaggingTask(net, num_tags=2).eval()  # no dropout: the two forwards below must agree
        ids = torch.randint(0, 12, (3, 10))
        tags = torch.full((3, 10), IGNORE)
        tags[:, :5] = 1
        assert task(ids).shape == (3, 10, 2)
        loss = task.training_step((ids, tags), 0)
        # Only the tagged tokens count: the loss is the cross-entropy over them alone.
        logits = task(ids)[:, :5].reshape(-1, 2)
        assert torch.allclose(loss, torch.nn.functional.cross_entropy(logits, tags[:, :5].reshape(-1)))


def quick_report(tmp_path, data_dir: str) -> str:
    """The report of direction's quick grid (bidirectional and causal, 2 seeds) on `data_dir`, laid out from copies of
    one real job (tests/lab_sweeps.py): the reference taggers are computed from that job's data."""
    env = {"ZOO_DATA_DIR": data_dir, "ZOO_CACHE_DIR": str(tmp_path / "cache")}
    record = quick_job("direction", tmp_path / "job", env=env, **{"model.net.causal": "false"})
    assert 0 <= record["metrics"]["val/acc"] <= 1 and "probe/grad_group/head@init" in record["metrics"]
    sweep = sweep_of_copies(tmp_path / "job", tmp_path / "sweep")
    write_report(sweep)
    assert_lab_report(sweep, min_arms=4)
    return (sweep / "report.md").read_text()


DATA_DIRS = {"fixtures": str(FIXTURES)}
if os.environ["ZOO_DATA_DIR"] != str(FIXTURES):  # the full data directory, where the session has one
    DATA_DIRS["data_dir"] = os.environ["ZOO_DATA_DIR"]


@pytest.mark.slow
@pytest.mark.lab
@pytest.mark.parametrize("data_dir", sorted(DATA_DIRS))
def test_quick_grid_reports_both_directions_against_the_left_context_taggers(data_dir, tmp_path):
    report = quick_report(tmp_path, DATA_DIRS[data_dir])
    assert "Quick run" in report and "### Verdict: " in report
    assert "majority class" in report and "left 6-char count tagger" in report
    assert "| False |" in report and "| True |" in report
    assert str(ROOT) not in (tmp_path / "sweep").as_posix()


def test_the_tagger_reference_refuses_data_that_is_not_character_tagging():
    from zoo.lab.decide.reference import UnavailableError, compute, reference_config

    ref = reference_config({"reference": {"kind": "tagger", "metric": "val/acc"}})
    assert ref["orders"] == 4  # the default number of count taggers
    language_model = {"data": {"_target_": "zoo.data.LanguageModelDataModule"}}
    with pytest.raises(UnavailableError, match="is not a character-tagging dataset"):
        compute(ref, language_model)
