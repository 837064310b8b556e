"""zoo-prepare: token shards made once from text, JSON lines and Parquet files.

- The shards hold exactly the tokens of encoding each document alone, each followed by the end-of-text token.
- Preparing is deterministic, and a run interrupted between two shards resumes into the same bytes.
- The validation split is a draw per document, or the val_files; a published tokenizer can be used.
- The command line takes the data configs; bad input is one line.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from zoo.data import prepare as prepare_module
from zoo.data.prepare import PrepareOptions, prepare_shards
from zoo.data.tokenizer import load_published_tokenizer, tokenizer_from_json

from conftest import ROOT, assert_ok, assert_one_line_error, run_module


def run_prepare(*args: str):
    """`python -m zoo.prepare ...` as a user types it, from the test's start directory."""
    return run_module("zoo.prepare", *args, env={"HYDRA_FULL_ERROR": "0"})


SHAKESPEARE = ROOT / "zoo" / "data" / "builtin" / "tinyshakespeare.txt.gz"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    """Tiny shakespeare's speeches as documents: the first third as paragraphs of a text file, the second as JSON
    lines, the rest as a Parquet file (Parquet row groups of 200)."""
    speeches = gzip.decompress(SHAKESPEARE.read_bytes()).decode("utf-8").split("\n\n")
    third = len(speeches) // 3
    root = tmp_path_factory.mktemp("corpus")
    text = root / "part1.txt"
    text.write_text("\n\n".join(speeches[:third]) + "\n", encoding="utf-8")
    lines = root / "part2.jsonl"
    lines.write_text(
        "".join(json.dumps({"id": i, "text": s}) + "\n" for i, s in enumerate(speeches[third : 2 * third]))
    )
    table = root / "part3.parquet"
    pq.write_table(pa.table({"text": speeches[2 * third :]}), table, row_group_size=200)
    return {"txt": text, "jsonl": lines, "parquet": table, "speeches": speeches}


def options(corpus, **changes) -> PrepareOptions:
    base = PrepareOptions(
        tokenizer="bpe",
        bpe_vocab_size=512,
        documents="paragraphs",
        shard_tokens=20_000,
        inputs={"train": [str(corpus[k]) for k in ("txt", "jsonl", "parquet")], "val": None},
    )
    return replace(base, **changes)


def shard_tokens(directory: Path, manifest: dict, split: str) -> np.ndarray:
    files = [directory / s["file"] for s in manifest["shards"][split]]
    return np.concatenate([np.fromfile(f, dtype=manifest["dtype"]) for f in files])


def expected_tokens(tokenizer, documents: list[str], separator: int) -> np.ndarray:
    return np.concatenate([np.asarray([*tokenizer.encode(d), separator]) for d in documents])


def split_documents(corpus, opts: PrepareOptions) -> dict[str, list[str]]:
    docs = [s.strip("\n") + "\n" for s in corpus["speeches"]]
    split = {"train": [], "val": []}
    for _, which, text in prepare_module._numbered_documents(opts):
        split[which].append(text)
    assert sum(len(v) for v in split.values()) == len([d for d in docs if d.strip()])
    return split


@pytest.mark.parametrize("kind", ["bpe", "char"])
def test_shards_hold_each_document_encoded_alone_then_end_of_text(corpus, tmp_path, kind):
    opts = options(corpus, tokenizer=kind)
    manifest = prepare_shards(opts, tmp_path, log=lambda _: None)
    tokenizer = tokenizer_from_json(manifest["tokenizer"])
    separator = manifest["separator_id"]
    if kind == "bpe":
        assert tokenizer.tokenizer.id_to_token(separator) == "<|endoftext|>"
    else:  # a character vocabulary has no end-of-text token: a newline, as files were joined before
        assert tokenizer.decode([separator]) == "\n"
    documents = split_documents(corpus, opts)
    assert 0.05 < len(documents["val"]) / len(documents["train"]) < 0.2  # val_fraction 0.1 of the documents
    for split in ("train", "val"):
        got = shard_tokens(tmp_path, manifest, split)
        np.testing.assert_array_equal(got, expected_tokens(tokenizer, documents[split], separator))
        assert manifest["tokens"][split] == len(got)
        assert manifest["documents"][split] == len(documents[split])
    assert len(manifest["shards"]["train"]) > 3  # several shards: the boundaries are crossed
    for shard in manifest["shards"]["train"]:
        assert shard["tokens"] >= opts.shard_tokens or shard is manifest["shards"]["train"][-1]
    assert not (tmp_path / "progress.json").exists()


def test_preparing_is_deterministic_and_resumes_after_an_interruption(corpus, tmp_path, monkeypatch):
    opts = options(corpus)
    whole = prepare_shards(opts, tmp_path / "whole", log=lambda _: None)

    real_flush, calls = prepare_module._ShardSet.flush, []

    def dies_on_the_third_flush(self, documents_done):
        calls.append(documents_done)
        if len(calls) == 3:
            raise KeyboardInterrupt  # as if killed: two shard pairs and their progress are on disk
        real_flush(self, documents_done)

    monkeypatch.setattr(prepare_module._ShardSet, "flush", dies_on_the_third_flush)
    with pytest.raises(KeyboardInterrupt):
        prepare_shards(opts, tmp_path / "resumed", log=lambda _: None)
    assert json.loads((tmp_path / "resumed" / "progress.json").read_text())["documents_done"] == calls[1]
    assert not (tmp_path / "resumed" / "manifest.json").exists()
    monkeypatch.setattr(prepare_module._ShardSet, "flush", real_flush)
    messages = []
    resumed = prepare_shards(opts, tmp_path / "resumed", log=messages.append)
    assert messages[0].startswith(f"resuming after document {calls[1]:,}")

    def files(directory):
        return {p.name: p.read_bytes() for p in directory.iterdir() if p.suffix == ".bin"}

    assert files(tmp_path / "resumed") == files(tmp_path / "whole")
    drop = ("seconds",)
    assert {k: v for k, v in resumed.items() if k not in drop} == {k: v for k, v in whole.items() if k not in drop}
    # Made: the next call finds it; other options in the same folder are refused.
    assert prepare_shards(opts, tmp_path / "whole", log=messages.append) == whole
    with pytest.raises(ValueError, match="holds shards made with other options"):
        prepare_shards(replace(opts, shard_tokens=999), tmp_path / "whole", log=lambda _: None)


def test_val_files_and_a_published_tokenizer(corpus, tmp_path):
    """vocab.json + merges.txt as a published GPT-2-style tokenizer ships them; the val files are the val split."""
    trained = prepare_shards(options(corpus), tmp_path / "first", log=lambda _: None)
    published = tmp_path / "published"
    published.mkdir()
    tokenizer_from_json(trained["tokenizer"]).tokenizer.model.save(str(published))
    assert {p.name for p in published.iterdir()} == {"vocab.json", "merges.txt"}
    opts = options(corpus, tokenizer=str(published))
    opts = replace(opts, inputs={"train": [str(corpus["txt"]), str(corpus["parquet"])], "val": [str(corpus["jsonl"])]})
    manifest = prepare_shards(opts, tmp_path / "second", log=lambda _: None)
    tokenizer = load_published_tokenizer(published)
    # Without an end-of-text token in vocab.json, what separates documents is refused, not invented... unless
    # the vocabulary has it: ours has <|endoftext|> at id 0.
    assert manifest["separator_id"] == tokenizer.tokenizer.token_to_id("<|endoftext|>") == 0
    val_docs = list(prepare_module.read_documents([corpus["jsonl"]], text_field="text"))
    np.testing.assert_array_equal(
        shard_tokens(tmp_path / "second", manifest, "val"), expected_tokens(tokenizer, val_docs, 0)
    )


def test_bad_documents_are_named(tmp_path):
    bad = tmp_path / "rows.jsonl"
    bad.write_text('{"text": "fine"}\n{"body": "no text field"}\n')
    opts = PrepareOptions(tokenizer="char", inputs={"train": [str(bad)], "val": None})
    with pytest.raises(
        ValueError, match=r"rows.jsonl, line 2: no text field 'text' \(keys: body\); set prepare.text_field"
    ):
        prepare_shards(opts, tmp_path / "out", log=lambda _: None)
    table = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"body": ["a"]}), table)
    opts = PrepareOptions(tokenizer="char", inputs={"train": [str(table)], "val": None})
    with pytest.raises(ValueError, match=r"no column 'text' \(columns: body\)"):
        prepare_shards(opts, tmp_path / "out2", log=lambda _: None)


@pytest.mark.slow
def test_the_command_takes_the_data_configs(corpus, tmp_path):
    out = tmp_path / "shards"
    command = [
        "data=text_files",
        f"data.text_files=[{corpus['txt']},{corpus['jsonl']}]",
        "data.bpe_vocab_size=300",
        "prepare.documents=paragraphs",
        "prepare.shard_tokens=30000",
        f"prepare.output_dir={out}",
    ]
    result = run_prepare(*command)
    assert_ok(result)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["options"]["bpe_vocab_size"] == 300 and manifest["tokens"]["train"] > 30000
    assert "prepared" in result.stdout + result.stderr
    assert_one_line_error(run_prepare(*command[:-1]), "prepare.output_dir")
    result = run_prepare("data=text_files", "data.text_files=[nope.txt]", f"prepare.output_dir={out}2")
    assert_one_line_error(result, "input file not found")
