"""train.py / generate.py / eval.py with the Transformer on Multi30k, run as a user runs them (subprocesses)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch

from zoo.entry.generate import parse_args, run

from conftest import assert_ok, assert_one_line_error, run_script

pytestmark = pytest.mark.slow

# A few steps of the CPU recipe, with evaluation cut down so the suite stays fast: 2 val batches with greedy
# BLEU, 1 test batch with a beam of 2, translations of at most source length + 3 tokens.
FEW_STEPS = [
    "experiment=transformer_multi30k",
    "trainer.max_steps=3",
    "trainer.limit_val_batches=2",
    "+trainer.limit_test_batches=1",
    "data.max_tokens=512",
    "model.test_beam_size=2",
    "model.max_len_b=3",
    "trainer.log_every_n_steps=1",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, data_dir):
    run_dir = tmp_path_factory.mktemp("mt-run")
    assert_ok(run_script("train.py", *FEW_STEPS, f"hydra.run.dir={run_dir}"))
    return run_dir


def test_fast_dev_run_of_model_transformer(tmp_path):
    assert_ok(run_script("train.py", "model=transformer", "trainer.fast_dev_run=true", f"hydra.run.dir={tmp_path}"))


def test_experiment_logs_losses_bleu_and_translations(trained):
    rows = list(csv.DictReader(Path(trained / "csv" / "metrics.csv").read_text().splitlines()))
    assert len([r for r in rows if r.get("train/loss")]) == 3
    bleu = [float(r["val/bleu"]) for r in rows if r.get("val/bleu")]
    assert bleu and all(0.0 <= b <= 100.0 for b in bleu)
    assert any(r.get("val/loss") for r in rows) and any(r.get("test/loss") for r in rows)
    assert any(r.get("test/bleu") for r in rows)
    text = (trained / "csv" / "val_translations.txt").read_text()
    assert text.count("SRC: ") == 4 and "REF: " in text and "HYP: " in text


def test_checkpoint_records_model_task_and_tokenizer(trained):
    checkpoint = torch.load(trained / "checkpoints" / "last.ckpt", weights_only=True)
    info = checkpoint["zoo"]
    assert info["task"] == "seq2seq" and info["model_type"] == "transformer"
    assert info["model_config"]["d_model"] == 256 and info["model_config"]["src_vocab_size"] == 8000
    assert '"translation_bpe"' in info["tokenizer"]


def test_generate_translates_sentences_and_files(trained, tmp_path):
    ckpt = str(trained / "checkpoints" / "last.ckpt")
    result = run_script(
        "generate.py",
        ckpt,
        "--source",
        "Ein Hund rennt.",
        "--source",
        "Zwei Männer.",
        "--beam-size",
        "3",
        "--max-len-b",
        "4",
    )
    assert_ok(result)
    assert len(result.stdout.splitlines()) == 2  # one line per sentence (an untrained model: any words)
    source = tmp_path / "in.de"
    source.write_text("Ein Hund rennt.\n\nZwei Männer.\n")
    by_file = run_script("generate.py", ckpt, "--input", str(source), "--beam-size", "3", "--max-len-b", "4")
    assert_ok(by_file)
    lines = by_file.stdout.split("\n")[:-1]
    assert len(lines) == 3 and lines[1] == ""  # the empty line stays an empty line
    assert [lines[0], lines[2]] == result.stdout.splitlines()


def test_generate_rejects_bad_translation_input(trained, tmp_path):
    ckpt = str(trained / "checkpoints" / "last.ckpt")
    long_sentence = " ".join(["Hund"] * 300)
    assert_one_line_error(
        run_script("generate.py", ckpt, "--source", "Hallo.", "--source", long_sentence),
        "sentence 2 has",
        "max_len is 256",
    )
    with pytest.raises(ValueError, match="give sentences with --source or a file with --input"):
        run(parse_args([ckpt]))
    with pytest.raises(FileNotFoundError, match="input file not found"):
        run(parse_args([ckpt, "--input", str(tmp_path / "nope.txt")]))


def test_translation_rejects_a_checkpoint_of_another_model(trained, tmp_path):
    checkpoint = torch.load(trained / "checkpoints" / "last.ckpt", weights_only=True)
    checkpoint["zoo"].update(task="causal_lm", model_type="gpt")
    torch.save(checkpoint, tmp_path / "gpt.ckpt")
    result = run_script("generate.py", str(tmp_path / "gpt.ckpt"), "--source", "Ein Hund.")
    assert_one_line_error(result, "gpt model", "'seq2seq' checkpoint")


def test_eval_scores_bleu_on_the_test_split(trained, tmp_path):
    result = run_script(
        "eval.py",
        f"ckpt_path={trained / 'checkpoints' / 'last.ckpt'}",
        "split=test",
        "+trainer.limit_test_batches=1",
        f"hydra.run.dir={tmp_path}",
    )
    assert_ok(result)
    assert "test/bleu" in result.stdout and "test/loss" in result.stdout
