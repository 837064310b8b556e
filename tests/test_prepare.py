"""zoo-prepare: token shards made once from text, JSON lines and Parquet files.

- The shards hold exactly the tokens of encoding each document alone, each followed by the end-of-text token.
- Preparing is deterministic, and a run interrupted between two shards resumes into the same bytes.
- The validation split is a draw per document, or the val_files; a published tokenizer can be used.
- A document longer than a piece is encoded in pieces with the tokens (and BPE) of the whole; one large text file
  prepares with the defaults (split by position); a split that would be empty is refused before any work.
- A run started again over changed input is refused; an input error leaves nothing that blocks the corrected run.
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
from zoo.data.documents import read_documents
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
    read = dict(text_unit=opts.documents, text_field=opts.text_field)
    for number, text in enumerate(read_documents([Path(p) for p in opts.inputs["train"]], **read)):
        split["val" if prepare_module._is_val(opts.seed, number, opts.val_fraction) else "train"].append(text)
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
    val_docs = list(read_documents([corpus["jsonl"]], text_field="text"))
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


# ---- documents longer than a piece, one large file, the split checked first -------------------------------------


def shakespeare(chars: int, start: int = 0) -> str:
    return gzip.decompress(SHAKESPEARE.read_bytes()).decode("utf-8")[start : start + chars]


def compose_prepare(*overrides: str):
    """zoo/conf/prepare.yaml composed with `overrides`, as `python -m zoo.prepare ...` composes it."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "zoo" / "conf"), version_base="1.3"):
        cfg = compose(config_name="prepare", overrides=list(overrides))
    GlobalHydra.instance().clear()
    return cfg


PIECE = 2_000  # characters: a 40,000-character document comes in about 20 pieces


@pytest.mark.parametrize("split", ["documents", "position"])
def test_a_document_longer_than_a_piece_is_encoded_in_pieces_with_the_tokens_of_encoding_it_whole(
    tmp_path, monkeypatch, split
):
    """One text file, one document, cut into pieces at places where no token spans the cut: the tokenizer trained on
    the pieces and the shards' tokens are those of the whole text; shards may end inside the document, and a run
    interrupted there resumes into the same bytes."""
    from zoo.data.documents import read_document_pieces
    from zoo.data.tokenizer import BPETokenizer

    book, held = tmp_path / "book.txt", tmp_path / "held.txt"
    book.write_text(shakespeare(40_000), encoding="utf-8")
    held.write_text(shakespeare(10_000, start=500_000), encoding="utf-8")
    pieces = list(read_document_pieces([book], piece_chars=PIECE))
    assert len(pieces) >= 20 and all(len(p) <= PIECE for p, _ in pieces)
    assert [last for _, last in pieces] == [False] * (len(pieces) - 1) + [True]
    assert "".join(p for p, _ in pieces) == book.read_text(encoding="utf-8")
    if split == "documents":  # the book is the training document, the held-out text the validation one
        opts = PrepareOptions(bpe_vocab_size=300, shard_tokens=4_000, inputs={"train": [str(book)], "val": [str(held)]})
        texts = {"train": book.read_text(encoding="utf-8"), "val": held.read_text(encoding="utf-8")}
        reference = BPETokenizer.train_from_documents(iter([texts["train"]]), 300)
    else:  # its last tenth by position is validation, as train.py splits data=text_files
        opts = PrepareOptions(bpe_vocab_size=300, shard_tokens=4_000, split="position", inputs={"train": [str(book)]})
        text = book.read_text(encoding="utf-8")
        texts = {"train": text[:36_000], "val": text[36_000:]}
        reference = BPETokenizer.train(texts["train"], 300)  # LanguageModelDataModule's tokenizer, as ever
    manifest = prepare_shards(opts, tmp_path / "whole", piece_chars=PIECE, log=lambda _: None)
    assert manifest["tokenizer"] == reference.to_json()  # the pieces' words are the whole text's
    tokenizer = tokenizer_from_json(manifest["tokenizer"])
    after = [manifest["separator_id"]] if split == "documents" else []
    for which in ("train", "val"):
        expected = np.asarray([*tokenizer.encode(texts[which]), *after])
        np.testing.assert_array_equal(shard_tokens(tmp_path / "whole", manifest, which), expected)
    assert len(manifest["shards"]["train"]) >= 3  # shards ended inside the one training document
    # The cut's place matters: the text cut every PIECE characters instead would not give the same tokens.
    train = texts["train"]
    naive = [tokenizer.encode(train[i : i + PIECE]) for i in range(0, len(train), PIECE)]
    assert [t for ids in naive for t in ids] != tokenizer.encode(train)

    real_flush, calls = prepare_module._ShardSet.flush, []

    def dies_on_the_second_flush(self, done):
        calls.append(done)
        if len(calls) == 2:
            raise KeyboardInterrupt  # one shard pair on disk, ending inside the document
        real_flush(self, done)

    monkeypatch.setattr(prepare_module._ShardSet, "flush", dies_on_the_second_flush)
    with pytest.raises(KeyboardInterrupt):
        prepare_shards(opts, tmp_path / "resumed", piece_chars=PIECE, log=lambda _: None)
    progress = json.loads((tmp_path / "resumed" / "progress.json").read_text())
    assert progress["documents_done"] == 0 and 0 < progress["pieces_done"] == calls[0]
    monkeypatch.setattr(prepare_module._ShardSet, "flush", real_flush)
    # Started again with another piece size, it still cuts the pieces it began with.
    resumed = prepare_shards(opts, tmp_path / "resumed", piece_chars=PIECE * 3, log=lambda _: None)
    assert resumed["shards"] == manifest["shards"] and resumed["piece_chars"] == PIECE


def test_one_large_text_file_prepares_with_the_defaults(tmp_path):
    """`zoo-prepare data=text_files data.text_files=[one.txt]` with nothing else set: split by position as
    train.py splits it (90/10, no end-of-text token), both splits filled, the file read in pieces
    (prepare.piece_chars)."""
    from zoo.entry.prepare import prepare

    one = tmp_path / "one.txt"
    one.write_text(shakespeare(30_000), encoding="utf-8")
    out = tmp_path / "shards"
    cfg = compose_prepare(
        "data=text_files",
        f"data.text_files=[{one}]",
        "data.bpe_vocab_size=300",
        f"prepare.piece_chars={PIECE}",
        f"prepare.output_dir={out}",
    )
    assert cfg.prepare.split == "auto" and cfg.prepare.documents == "file"  # the defaults
    manifest = prepare(cfg)
    assert manifest["options"]["split"] == "position" and manifest["piece_chars"] == PIECE
    assert manifest["separator_id"] is None
    tokenizer = tokenizer_from_json(manifest["tokenizer"])
    text = one.read_text(encoding="utf-8")
    cut = int(len(text) * 0.9)
    for which, part in (("train", text[:cut]), ("val", text[cut:])):
        np.testing.assert_array_equal(shard_tokens(out, manifest, which), tokenizer.encode(part))
    # JSON lines (rows are documents) or paragraphs keep the split by document under the same default.
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"text": f"row {i}"}) + "\n" for i in range(50)))
    for overrides in ([f"data.text_files=[{rows}]"], [f"data.text_files=[{one}]", "prepare.documents=paragraphs"]):
        cfg = compose_prepare("data=text_files", *overrides, f"prepare.output_dir={tmp_path / 'x'}")
        from zoo.entry.prepare import options_from_config

        assert prepare_module.resolve_split(options_from_config(cfg)).split == "documents"


def test_a_split_without_documents_is_refused_before_anything_is_trained_or_encoded(tmp_path, monkeypatch):
    """One file as one document cannot fill two splits: said at once, with the count and the ways out, before a
    tokenizer is trained; nothing is left in the folder, so the corrected command runs there."""
    one = tmp_path / "one.txt"
    one.write_text(shakespeare(20_000), encoding="utf-8")
    opts = PrepareOptions(bpe_vocab_size=300, split="documents", inputs={"train": [str(one)], "val": None})

    def never(*args, **kwargs):
        raise AssertionError("a tokenizer was trained before the split was checked")

    monkeypatch.setattr(prepare_module, "build_tokenizer", never)
    with pytest.raises(ValueError) as refused:
        prepare_shards(opts, tmp_path / "out", log=lambda _: None)
    message = str(refused.value)
    assert message.startswith("the val split has no documents (1 in all, each text file or row of JSON lines or")
    assert "prepare.split=position" in message and "prepare.documents=paragraphs" in message
    assert "\n" not in message
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [".prepare.lock"]
    monkeypatch.undo()
    manifest = prepare_shards(replace(opts, documents="paragraphs"), tmp_path / "out", log=lambda _: None)
    assert manifest["documents"]["val"] > 0 and manifest["documents"]["train"] > 0


# ---- a resumed run over changed input ---------------------------------------------------------------------------


def test_a_run_started_again_over_changed_input_is_refused(corpus, tmp_path, monkeypatch):
    """progress.json records each input's size and modification time: an input edited after the interruption is
    named, with the way out, instead of resuming "after document N" of another text."""
    txt = tmp_path / "part1.txt"
    txt.write_bytes(corpus["txt"].read_bytes())
    opts = options(corpus, inputs={"train": [str(txt), str(corpus["jsonl"])], "val": None})
    real_flush = prepare_module._ShardSet.flush

    def dies_after_the_first_shard(self, done):
        real_flush(self, done)
        raise KeyboardInterrupt

    monkeypatch.setattr(prepare_module._ShardSet, "flush", dies_after_the_first_shard)
    with pytest.raises(KeyboardInterrupt):
        prepare_shards(opts, tmp_path / "out", log=lambda _: None)
    monkeypatch.setattr(prepare_module._ShardSet, "flush", real_flush)
    recorded = json.loads((tmp_path / "out" / "progress.json").read_text())["inputs"]
    assert [r["path"] for r in recorded] == [str(txt.resolve()), str(corpus["jsonl"].resolve())]
    assert recorded[0]["bytes"] == txt.stat().st_size and recorded[0]["mtime_ns"] == txt.stat().st_mtime_ns
    txt.write_text("A new first speech.\n\n" + txt.read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(ValueError) as refused:
        prepare_shards(opts, tmp_path / "out", log=lambda _: None)
    message = str(refused.value)
    assert message.startswith(f"{txt.resolve()} changed since the interrupted prepare in {tmp_path / 'out'} began")
    assert f"delete {tmp_path / 'out' / 'progress.json'}" in message
    assert (tmp_path / "out" / "progress.json").is_file()  # refused: the user decides
    (tmp_path / "out" / "progress.json").unlink()
    made = prepare_shards(opts, tmp_path / "out", log=lambda _: None)
    fresh = prepare_shards(opts, tmp_path / "fresh", log=lambda _: None)
    assert made["shards"] == fresh["shards"]  # all of the new text, none of the old


# ---- messages that name the file, the field and the fix ---------------------------------------------------------


def test_bad_rows_and_files_are_named_with_the_fix(tmp_path):
    def refused(*paths: Path, **changes) -> str:
        opts = PrepareOptions(tokenizer="char", inputs={"train": [str(p) for p in paths], "val": None}, **changes)
        with pytest.raises(ValueError) as error:
            prepare_shards(opts, tmp_path / "out", log=lambda _: None)
        assert not (tmp_path / "out" / "progress.json").exists()
        return str(error.value)

    numbers = tmp_path / "numbers.parquet"
    pq.write_table(pa.table({"text": [1, 2, 3], "body": ["a", "b", "c"]}), numbers)
    assert refused(numbers) == (
        f"{numbers}: the column 'text' holds int64 values, not text; set prepare.text_field to a column of strings "
        "(here: body)"
    )
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"text": "fine"}\n{"text": 42}\n')
    assert refused(rows) == (
        f"{rows}, line 2: the field 'text' is a number (42), not a string; set prepare.text_field to the field that "
        "holds the text"
    )
    # A file that is not UTF-8 among several text files: named, with the byte and its line.
    good, latin = tmp_path / "good.txt", tmp_path / "latin.txt"
    good.write_text("plain text\n" * 50)
    latin.write_bytes(b"first line\nna\xefve\n")
    message = refused(good, latin, documents="lines")
    assert message.startswith(f"{latin} is not UTF-8 text (byte offset 13, line 2: invalid continuation byte)")
    assert "data.text_files" in message


def test_an_input_error_found_while_encoding_leaves_nothing_that_stops_the_corrected_run(corpus, tmp_path):
    """With a given tokenizer nothing reads the input before encoding: a bad row near the end is found after
    shards were written. They and progress.json are removed, so the corrected file (now another size and time)
    prepares in the same folder instead of being refused as changed input."""
    trained = prepare_shards(options(corpus), tmp_path / "first", log=lambda _: None)
    given = tmp_path / "tokenizer.json"
    tokenizer_from_json(trained["tokenizer"]).tokenizer.save(str(given))
    rows = tmp_path / "rows.jsonl"
    speeches = [json.dumps({"text": s}) for s in corpus["speeches"][:3000]]
    rows.write_text("\n".join([*speeches, '{"text": null}']) + "\n")
    opts = options(corpus, tokenizer=str(given), inputs={"train": [str(rows)], "val": None})
    with pytest.raises(ValueError, match=r"rows.jsonl, line 3001: the field 'text' is null"):
        prepare_shards(opts, tmp_path / "out", batch_bytes=50_000, log=lambda _: None)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [".prepare.lock"]
    rows.write_text("\n".join(speeches) + "\n")
    manifest = prepare_shards(opts, tmp_path / "out", batch_bytes=50_000, log=lambda _: None)
    assert len(manifest["shards"]["train"]) > 1
