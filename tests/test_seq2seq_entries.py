"""The train, generate and eval entries with the Transformer on Multi30k, run in this process (tests/trained.py; the
trained run is the session's). generate.py's own one-line error and exit status: tests/test_entries.py."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch
from trained import evaluate_in_process, one_line_error, train_in_process

from zoo.entry import cli
from zoo.entry.generate import parse_args, run


@pytest.fixture(scope="module")
def trained(transformer_run):
    """A few steps of the CPU recipe, with evaluation cut down (tests/trained.py, TRANSFORMER_RUN)."""
    return transformer_run


def translated(capsys, *argv) -> str:
    """What generate.py prints for `argv`, run in this process."""
    capsys.readouterr()
    cli.generate([str(a) for a in argv])
    return capsys.readouterr().out


def test_fast_dev_run_of_model_transformer(tmp_path):
    result = train_in_process("model=transformer", "trainer.fast_dev_run=true", f"hydra.run.dir={tmp_path}")
    assert "Running in `fast_dev_run` mode" in result.stdout + result.stderr


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


def test_generate_translates_sentences_and_files(trained, tmp_path, capsys):
    ckpt = trained / "checkpoints" / "last.ckpt"
    sentences = ["--source", "Ein Hund rennt.", "--source", "Zwei Männer."]
    out = translated(capsys, ckpt, *sentences, "--beam-size", "3", "--max-len-b", "4")
    assert len(out.splitlines()) == 2  # one line per sentence (an untrained model: any words)
    source = tmp_path / "in.de"
    source.write_text("Ein Hund rennt.\n\nZwei Männer.\n")
    lines = translated(capsys, ckpt, "--input", source, "--beam-size", "3", "--max-len-b", "4").split("\n")[:-1]
    assert len(lines) == 3 and lines[1] == ""  # the empty line stays an empty line
    assert [lines[0], lines[2]] == out.splitlines()


def test_generate_rejects_bad_translation_input(trained, tmp_path, capsys):
    ckpt = str(trained / "checkpoints" / "last.ckpt")
    long_sentence = " ".join(["Hund"] * 300)
    err = one_line_error(capsys, cli.generate, ckpt, "--source", "Hallo.", "--source", long_sentence)
    assert "sentence 2 has" in err and "max_len is 256" in err
    with pytest.raises(ValueError, match="give sentences with --source or a file with --input"):
        run(parse_args([ckpt]))
    with pytest.raises(FileNotFoundError, match="input file not found"):
        run(parse_args([ckpt, "--input", str(tmp_path / "nope.txt")]))


def test_translation_rejects_a_checkpoint_of_another_model(trained, tmp_path, capsys):
    checkpoint = torch.load(trained / "checkpoints" / "last.ckpt", weights_only=True)
    checkpoint["zoo"].update(task="causal_lm", model_type="gpt")
    torch.save(checkpoint, tmp_path / "gpt.ckpt")
    err = one_line_error(capsys, cli.generate, tmp_path / "gpt.ckpt", "--source", "Ein Hund.")
    assert "gpt model" in err and "'seq2seq' checkpoint" in err


def test_eval_scores_bleu_on_the_test_split(trained, tmp_path):
    result = evaluate_in_process(
        f"ckpt_path={trained / 'checkpoints' / 'last.ckpt'}",
        "split=test",
        "+trainer.limit_test_batches=1",
        f"hydra.run.dir={tmp_path}",
    )
    assert "test/bleu" in result.stdout and "test/loss" in result.stdout
