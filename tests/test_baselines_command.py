"""`python -m zoo.baselines data=...`: the count n-gram lines of a text data config, on the split training uses."""

from __future__ import annotations

import json
import math

import pytest
from test_configs import compose_train

from zoo.entry.baselines import measure, run

from conftest import assert_one_line_error, run_module


def compose(tmp_path, overrides):
    return compose_train(tmp_path, overrides, config_name="baselines")


def test_known_counts_give_known_losses(tmp_path):
    """'ab' repeated: the unigram is exactly ln 2 and a bigram table predicts the alternation almost surely."""
    text = tmp_path / "ab.txt"
    text.write_text("ab" * 500)
    out = tmp_path / "lines.json"
    cfg = compose(
        tmp_path,
        ["data=text_files", f"data.text_files=[{text}]", "data.tokenizer=char", f"baselines.output={out}"],
    )
    record = run(cfg)
    assert record["vocab_size"] == 2 and (record["train_tokens"], record["val_tokens"]) == (900, 100)
    losses = {int(k): v for k, v in record["losses"].items()}
    assert sorted(losses) == [1, 2, 3, 4, 5]
    assert losses[1] == pytest.approx(math.log(2), abs=1e-12)
    assert all(losses[k] < 0.01 for k in (2, 3, 4, 5))
    assert json.loads(out.read_text()) == record


def test_tiny_shakespeare_lines_are_the_published_ones(tmp_path):
    """The built-in tiny shakespeare (the README's first run): the 4- and 5-gram lines the issues and docs quote."""
    losses = measure(compose(tmp_path, []))["losses"]
    assert losses["4"] == pytest.approx(1.729, abs=0.002) and losses["5"] == pytest.approx(1.579, abs=0.002)


def test_an_order_past_63_bits_is_one_line_naming_the_option(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("".join(chr(0x4E00 + i) for i in range(7000)) * 2)  # a vocabulary of 7000 characters
    cfg = compose(tmp_path, ["data=text_files", f"data.text_files=[{text}]", "data.tokenizer=char"])
    with pytest.raises(ValueError, match=r"baselines.orders=5: .*lower baselines.orders"):
        measure(cfg)


@pytest.mark.slow
def test_the_command_prints_a_line_per_order(tmp_path):
    result = run_module("zoo.baselines", "baselines.orders=3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert [line.split()[0] for line in result.stdout.splitlines()[-3:]] == ["unigram", "bigram", "trigram"]
    bad = run_module("zoo.baselines", "baselines.method=witten_bell", cwd=tmp_path)
    assert_one_line_error(bad, "baselines.method='witten_bell'", "kneser_ney")
