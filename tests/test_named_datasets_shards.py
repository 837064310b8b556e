"""The small named datasets (data=shakespeare_char, ...) and the user's text files go through the token shards.

LanguageModelDataModule prepares its cache as zoo-prepare's shards with a manifest (split="position") and reads them
through memory maps. The tokens must stay those the in-memory path gave before, since recorded results (the README's
figures, the lab's n-gram references) were measured on them: here they are computed again from the text itself, the
way that path made them (files joined by a newline, the last val_fraction of the characters for validation, a
character vocabulary of the sorted characters of the whole text), and compared id for id.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from zoo.data import LanguageModelDataModule
from zoo.data import prepare as prepare_module
from zoo.data.prepare import PrepareOptions, prepare_shards
from zoo.data.token_shards import TokenStream, read_manifest, split_tokens
from zoo.data.tokenizer import BPETokenizer, CharTokenizer


def raw(path: Path) -> str:
    """A file's text as the data reads it: its bytes decoded, a CRLF kept (read_text would make it a newline)."""
    return path.read_bytes().decode("utf-8")


def char_ids(text: str, chars: str) -> np.ndarray:
    index = {c: i for i, c in enumerate(chars)}
    return np.asarray([index[c] for c in text], dtype=np.int64)


def position_split(text: str, val_fraction: float) -> tuple[str, str]:
    cut = int(len(text) * (1 - val_fraction))
    return text[:cut], text[cut:]


def assert_tokens(dm: LanguageModelDataModule, train: np.ndarray, val: np.ndarray) -> None:
    for split, expected in (("train", train), ("val", val)):
        got = dm.tokens(split)
        assert isinstance(got, np.memmap)  # one shard per split: the plain array it always was
        np.testing.assert_array_equal(np.asarray(got, dtype=np.int64), expected)


@pytest.fixture()
def texts(tmp_path) -> list[Path]:
    """Two small files: non-ASCII characters, a CRLF, no final newline; the 70/30 cut falls inside the second."""
    first, second = tmp_path / "first.txt", tmp_path / "second.txt"
    first.write_text("To be, or not to be: that is the question.\n" * 6, encoding="utf-8")
    second.write_text("Ünïcödé ☃ and a CRLF\r\nthen more words " * 5 + "and no final newline", encoding="utf-8")
    return [first, second]


def lm(files: list[Path], cache: Path, **options) -> LanguageModelDataModule:
    dm = LanguageModelDataModule(dataset=None, text_files=[str(f) for f in files], cache_dir=str(cache), **options)
    dm.build_splits()
    return dm


def test_tiny_shakespeare_char_tokens_are_the_in_memory_paths(shakespeare_path, cache_dir):
    """nanoGPT's split of tiny shakespeare (1,003,854 / 111,540 characters, 65 of them), now read from shards."""
    dm = LanguageModelDataModule(cache_dir=str(cache_dir))  # data=shakespeare_char's defaults
    dm.build_splits()
    text = shakespeare_path.read_text(encoding="utf-8")
    chars = "".join(sorted(set(text)))
    assert isinstance(dm.tokenizer, CharTokenizer) and dm.tokenizer.chars == chars and dm.vocab_size == 65
    train, val = position_split(text, 0.1)
    assert (len(train), len(val)) == (1_003_854, 111_540)
    assert_tokens(dm, char_ids(train, chars), char_ids(val, chars))
    manifest = read_manifest(dm._cache_folder())
    assert manifest["options"]["split"] == "position" and manifest["separator_id"] is None
    assert manifest["tokens"] == {"train": 1_003_854, "val": 111_540}
    assert json.loads(manifest["tokenizer"]) == json.loads(dm.tokenizer.to_json())


def test_text_files_char_and_bpe_tokens_are_the_in_memory_paths(texts, tmp_path):
    text = "\n".join(raw(p) for p in texts)  # joined by a newline, no end-of-text token
    train, val = position_split(text, 0.3)
    assert len(train) > len(raw(texts[0]))  # the cut falls inside the second file
    dm = lm(texts, tmp_path / "cache", val_fraction=0.3)
    chars = "".join(sorted(set(text)))
    assert dm.tokenizer.chars == chars
    assert_tokens(dm, char_ids(train, chars), char_ids(val, chars))
    assert (dm._cache_folder() / "manifest.json").is_file()
    # BPE: trained on the training text alone, each split encoded whole.
    bpe = lm(texts, tmp_path / "cache", val_fraction=0.3, tokenizer="bpe", bpe_vocab_size=300)
    reference = BPETokenizer.train(train, 300)
    assert bpe.tokenizer.to_json() == reference.to_json()
    assert_tokens(bpe, np.asarray(reference.encode(train)), np.asarray(reference.encode(val)))


def test_val_files_are_the_validation_text(texts, tmp_path):
    val_file = tmp_path / "val.txt"
    val_file.write_text("a held-out line §\n" * 4, encoding="utf-8")
    dm = lm(texts, tmp_path / "cache", val_files=[str(val_file), str(texts[0])])
    train = "\n".join(raw(p) for p in texts)
    val = raw(val_file) + "\n" + raw(texts[0])
    chars = "".join(sorted(set(train + val)))
    assert_tokens(dm, char_ids(train, chars), char_ids(val, chars))


def fake_checkpoint(path: Path, tokenizer) -> Path:
    """What a zoo checkpoint holds that the data reads: the tokenizer in its "zoo" section."""
    torch.save({"zoo": {"tokenizer": tokenizer.to_json()}, "state_dict": {}}, path)
    return path


def test_a_checkpoints_tokenizer(texts, tmp_path):
    text = "\n".join(raw(p) for p in texts)
    train, val = position_split(text, 0.1)
    # A character vocabulary in no sorted order, with characters the text lacks: the stored ids are kept.
    chars = "".join(sorted(set(text) | set("xyz#"), reverse=True))
    char_ckpt = fake_checkpoint(tmp_path / "char.ckpt", CharTokenizer(chars))
    dm = lm(texts, tmp_path / "cache", tokenizer=str(char_ckpt))
    assert dm.tokenizer.chars == chars
    assert_tokens(dm, char_ids(train, chars), char_ids(val, chars))
    assert dm._cache_folder().name.startswith("first-given-")
    bpe = BPETokenizer.train(text, 280)
    bpe_ckpt = fake_checkpoint(tmp_path / "bpe.ckpt", bpe)
    dm = lm(texts, tmp_path / "cache", tokenizer=str(bpe_ckpt))
    assert_tokens(dm, np.asarray(bpe.encode(train)), np.asarray(bpe.encode(val)))
    # zoo-prepare takes a checkpoint's tokenizer too, in either split.
    options = PrepareOptions(tokenizer=str(bpe_ckpt), inputs={"train": [str(texts[0])], "val": [str(texts[1])]})
    manifest = prepare_shards(options, tmp_path / "documents", log=lambda _: None)
    assert manifest["tokenizer"] == bpe.to_json() and manifest["separator_id"] == bpe.eos_id


def test_zoo_prepare_position_split_is_what_training_reads(texts, tmp_path, monkeypatch):
    """The same shards from zoo-prepare's options, also cut into several shards, and resumed after an interruption."""
    options = PrepareOptions(
        tokenizer="char", split="position", val_fraction=0.3, inputs={"train": [str(p) for p in texts], "val": None}
    )
    dm = lm(texts, tmp_path / "cache", val_fraction=0.3)
    manifest = prepare_shards(options, tmp_path / "one", log=lambda _: None)
    for split in ("train", "val"):
        np.testing.assert_array_equal(split_tokens(tmp_path / "one", manifest, split), dm.tokens(split))
    # A third file and small shards: shards end between files, the stream reads on across them.
    more = [*texts, texts[0]]
    small = replace(options, shard_tokens=300, inputs={"train": [str(p) for p in more], "val": None})
    whole = prepare_shards(small, tmp_path / "many", log=lambda _: None)
    assert len(whole["shards"]["train"]) == 2
    stream = split_tokens(tmp_path / "many", whole, "train")
    text = "\n".join(raw(p) for p in more)
    train, _ = position_split(text, 0.3)
    assert isinstance(stream, TokenStream)
    np.testing.assert_array_equal(np.asarray(stream), char_ids(train, whole_chars := "".join(sorted(set(text)))))
    np.testing.assert_array_equal(stream[250:350], char_ids(train[250:350], whole_chars))

    real_flush = prepare_module._ShardSet.flush

    def dies_after_the_first_shard(self, done):
        real_flush(self, done)
        raise KeyboardInterrupt

    monkeypatch.setattr(prepare_module._ShardSet, "flush", dies_after_the_first_shard)
    with pytest.raises(KeyboardInterrupt):
        prepare_shards(small, tmp_path / "resumed", log=lambda _: None)
    monkeypatch.setattr(prepare_module._ShardSet, "flush", real_flush)
    assert (tmp_path / "resumed" / "progress.json").is_file()
    resumed = prepare_shards(small, tmp_path / "resumed", log=lambda _: None)
    assert resumed["shards"] == whole["shards"]


def test_position_split_options_are_checked_and_old_manifests_still_found(texts, tmp_path):
    inputs = {"train": [str(p) for p in texts], "val": None}
    with pytest.raises(ValueError, match="prepare.split must be one of documents, position"):
        prepare_shards(PrepareOptions(split="random", inputs=inputs), tmp_path / "a", log=lambda _: None)
    with pytest.raises(ValueError, match="prepare.documents=lines does not go with prepare.split=position"):
        prepare_shards(PrepareOptions(split="position", documents="lines", inputs=inputs), tmp_path / "a")
    # A manifest made before `split` existed names no split: it is read as the document split it was.
    options = PrepareOptions(tokenizer="char", inputs={"train": [str(texts[0])], "val": [str(texts[1])]})
    made = prepare_shards(options, tmp_path / "old", log=lambda _: None)
    path = tmp_path / "old" / "manifest.json"
    recorded = json.loads(path.read_text())
    del recorded["options"]["split"]
    path.write_text(json.dumps(recorded))
    messages = []
    assert prepare_shards(options, tmp_path / "old", log=messages.append)["shards"] == made["shards"]
    assert messages == [f"already prepared: {path}"]


def test_zoo_prepare_makes_the_named_datasets_shards_from_its_config(tmp_path, cache_dir):
    """`zoo-prepare data=shakespeare_char prepare.split=position` (its options, from the composed config) writes the
    tokens training reads."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import open_dict

    from zoo.entry.prepare import options_from_config

    from conftest import ROOT

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "zoo" / "conf"), version_base="1.3"):
        overrides = ["data=shakespeare_char", "prepare.split=position", f"prepare.output_dir={tmp_path / 'shards'}"]
        cfg = compose(config_name="prepare", overrides=overrides)
    GlobalHydra.instance().clear()
    with open_dict(cfg):
        cfg.paths.root_dir, cfg.paths.cache_dir = str(tmp_path), str(cache_dir)
    options = options_from_config(cfg)
    assert options.split == "position" and options.tokenizer == "char"
    manifest = prepare_shards(options, tmp_path / "shards", log=lambda _: None)
    dm = LanguageModelDataModule(cache_dir=str(cache_dir))
    dm.build_splits()
    assert manifest["tokenizer"] == dm.tokenizer.to_json()
    for split in ("train", "val"):
        np.testing.assert_array_equal(split_tokens(tmp_path / "shards", manifest, split), dm.tokens(split))
