"""The language-model data pipeline on the real tiny shakespeare file."""

from __future__ import annotations

import functools
import hashlib
import http.server
import threading

import lightning as L
import numpy as np
import pytest
import torch

from zoo.data import BPETokenizer, CharTokenizer, DatasetFile, LanguageModelDataModule, tokenizer_from_json
from zoo.data.sources import fetch, resolve_dataset
from zoo.data.windows import DisjointWindows, RandomWindows


@pytest.fixture(scope="module")
def char_dm(data_dir, cache_dir):
    dm = LanguageModelDataModule(data_dir=str(data_dir), cache_dir=str(cache_dir))
    dm.setup("fit")
    return dm


def test_char_level_matches_nanogpt_split(char_dm, shakespeare_path):
    """65 characters; the 90/10 split by position gives nanoGPT's 1,003,854 / 111,540 tokens, in file order."""
    assert char_dm.vocab_size == 65
    assert len(char_dm._splits["train"]) == 1_003_854
    assert len(char_dm._splits["val"]) == 111_540
    text = shakespeare_path.read_text()
    assert char_dm.tokenizer.decode(char_dm._splits["val"][:200].tolist()) == text[1_003_854 : 1_003_854 + 200]


def test_train_windows_are_shifted_targets(char_dm):
    """Each sample's target is its input moved one token to the left; batches are the global batch here."""
    x, y = next(iter(char_dm.train_dataloader()))
    assert x.shape == (12, 64) and x.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])


def test_validation_windows_disjoint_and_fixed(char_dm):
    """Validation windows never overlap, cover the split and come in the same spread-out order every time."""
    windows = DisjointWindows(char_dm._splits["val"], 64, seed=0)
    starts = windows.starts
    assert len(set(starts.tolist())) == len(starts) == (111_540 - 1) // 64
    assert np.all(np.sort(starts) == np.arange(len(starts)) * 64)
    assert not np.all(starts[:-1] < starts[1:])  # shuffled, not the first slice of the split
    again = DisjointWindows(char_dm._splits["val"], 64, seed=0)
    assert np.array_equal(starts, again.starts)
    first = [b[0] for b in char_dm.val_dataloader()][:2]
    second = [b[0] for b in char_dm.val_dataloader()][:2]
    assert all(torch.equal(a, b) for a, b in zip(first, second))


def test_too_short_split_is_rejected():
    with pytest.raises(ValueError, match="block_size"):
        RandomWindows(np.arange(10, dtype=np.uint16), block_size=64)


def test_bpe_tokenizer_trains_caches_and_round_trips(data_dir, cache_dir):
    """A byte-level BPE of the requested size is trained once; any text (even unseen characters) round-trips."""
    dm = LanguageModelDataModule(tokenizer="bpe", bpe_vocab_size=512, data_dir=str(data_dir), cache_dir=str(cache_dir))
    assert dm.vocab_size == 512
    meta = next(cache_dir.glob("tinyshakespeare-bpe-*/manifest.json"))
    stamp = meta.stat().st_mtime_ns
    again = LanguageModelDataModule(
        tokenizer="bpe", bpe_vocab_size=512, data_dir=str(data_dir), cache_dir=str(cache_dir)
    )
    assert again.tokenizer.to_json() == dm.tokenizer.to_json()
    assert meta.stat().st_mtime_ns == stamp  # reused, not rebuilt
    text = "ROMEO:\nWhat light through yonder — café ☃ breaks?"
    ids = dm.tokenizer.encode(text)
    assert dm.tokenizer.decode(ids) == text
    assert len(ids) < len(text.encode())  # merges happened
    restored = tokenizer_from_json(dm.tokenizer.to_json())
    assert isinstance(restored, BPETokenizer) and restored.encode(text) == ids


def test_char_tokenizer_rejects_unknown_characters():
    tok = CharTokenizer.train("abc\n")
    assert tok.decode(tok.encode("cab\n")) == "cab\n"
    with pytest.raises(ValueError, match="'z'.*not in the character vocabulary"):
        tok.encode("abz")


def test_global_batch_split_per_device(char_dm, data_dir, cache_dir):
    """batch_size is global: divided by world size x gradient accumulation, and refused when it does not divide."""
    dm = LanguageModelDataModule(batch_size=12, data_dir=str(data_dir), cache_dir=str(cache_dir))
    dm.trainer = L.Trainer(accelerator="cpu", devices=1, accumulate_grad_batches=3, logger=False)
    dm.setup("fit")
    assert dm.per_device_batch_size == 4
    assert next(iter(dm.train_dataloader()))[0].shape[0] == 4
    bad = LanguageModelDataModule(batch_size=10, data_dir=str(data_dir), cache_dir=str(cache_dir))
    bad.trainer = L.Trainer(accelerator="cpu", devices=1, accumulate_grad_batches=3, logger=False)
    with pytest.raises(ValueError, match="batch_size=10.*accumulate_grad_batches 3"):
        bad.setup("fit")


def test_user_text_files_with_separate_validation(tmp_path, cache_dir):
    train = tmp_path / "train.txt"
    val = tmp_path / "val.txt"
    train.write_text("the quick brown fox jumps over the lazy dog\n" * 50)
    val.write_text("a lazy dog sleeps\n" * 20)
    dm = LanguageModelDataModule(
        dataset=None,
        text_files=[str(train)],
        val_files=[str(val)],
        tokenizer="char",
        block_size=16,
        batch_size=4,
        cache_dir=str(cache_dir),
    )
    dm.setup("fit")
    assert dm.tokenizer.decode(dm._splits["val"][:18].tolist()) == "a lazy dog sleeps\n"
    assert len(dm._splits["train"]) == len(train.read_text())


def test_missing_dataset_names_the_path(tmp_path):
    """A named dataset the package does not ship (tiny shakespeare it does: tests/test_builtin_data.py)."""
    with pytest.raises(FileNotFoundError) as info:
        dm = LanguageModelDataModule(dataset="wikitext2", data_dir=str(tmp_path), cache_dir=str(tmp_path / "c"))
        dm.setup("fit")
    message = str(info.value)
    assert str(tmp_path / "wikitext2" / "wiki.valid.raw") in message and "ZOO_DATA_DIR" in message


def test_bad_options_fail_at_construction():
    with pytest.raises(ValueError, match="tokenizer 'words'"):
        LanguageModelDataModule(tokenizer="words")
    with pytest.raises(ValueError, match="exactly one of"):
        LanguageModelDataModule(dataset="tinyshakespeare", text_files=["a.txt"])
    with pytest.raises(ValueError, match="unknown dataset"):
        resolve_dataset("imagenet")


@pytest.fixture()
def local_server(tmp_path):
    """A real HTTP server on loopback serving tmp_path."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_download_checks_sha256(tmp_path, local_server, shakespeare_path):
    """The download path fetches over HTTP and keeps the file only when its sha256 matches."""
    payload = shakespeare_path.read_bytes()[:5000]
    (tmp_path / "input.txt").write_bytes(payload)
    good = DatasetFile("x/input.txt", f"{local_server}/input.txt", hashlib.sha256(payload).hexdigest())
    target = tmp_path / "out" / "input.txt"
    fetch(good.url, good.sha256, target)
    assert target.read_bytes() == payload
    bad = DatasetFile("x/input.txt", f"{local_server}/input.txt", "0" * 64)
    other = tmp_path / "out2" / "input.txt"
    with pytest.raises(ValueError, match="sha256"):
        fetch(bad.url, bad.sha256, other)
    assert not other.exists() and not any(other.parent.iterdir())
