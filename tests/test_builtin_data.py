"""The tiny shakespeare shipped in the package: canonical bytes, the lookup order, and the main command trained on
a fresh machine with no data folder and no network."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest
import torch

from zoo.data import LanguageModelDataModule
from zoo.data.builtin import BUILTIN_FILES, read_builtin
from zoo.data.sources import DATASETS, resolve_dataset

from conftest import ROOT, assert_ok

CANONICAL = DATASETS["tinyshakespeare"][0]


def test_shipped_copy_is_the_canonical_file(data_dir):
    text = read_builtin(CANONICAL.relpath, CANONICAL.sha256)
    assert (
        hashlib.sha256(text).hexdigest()
        == CANONICAL.sha256
        == ("86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed")
    )
    assert len(text) == 1_115_394 and text.startswith(b"First Citizen:\nBefore we proceed any further, hear me speak.")
    if (data_dir / CANONICAL.relpath).is_file():
        assert text == (data_dir / CANONICAL.relpath).read_bytes()
    assert set(BUILTIN_FILES) == {CANONICAL.relpath}


def test_a_wrong_checksum_is_refused():
    with pytest.raises(ValueError, match=r"shipped in the package .* has sha256 86c4e6aa.*expected 0000.*reinstall"):
        read_builtin(CANONICAL.relpath, "0" * 64)


def test_lookup_order_data_folder_then_shipped_copy(tmp_path):
    """The data folder wins when it has the file; else the shipped copy, decompressed once into the cache (a
    damaged cached copy is rewritten). Neither needs a download, even with download=false."""
    data, cache = tmp_path / "data", tmp_path / "cache"
    own = data / "tinyshakespeare" / "input.txt"
    own.parent.mkdir(parents=True)
    own.write_text("my own shakespeare\n")
    assert resolve_dataset("tinyshakespeare", data, cache_dir=cache) == [own]
    own.unlink()
    (path,) = resolve_dataset("tinyshakespeare", data, download_missing=False, cache_dir=cache)
    assert path == cache / "builtin" / "tinyshakespeare" / "input.txt"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == CANONICAL.sha256
    stamp = path.stat().st_mtime_ns
    assert resolve_dataset("tinyshakespeare", data, cache_dir=cache) == [path]
    assert path.stat().st_mtime_ns == stamp  # reused
    path.write_bytes(path.read_bytes()[:-1])
    resolve_dataset("tinyshakespeare", data, cache_dir=cache)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == CANONICAL.sha256
    assert sorted(p.name for p in path.parent.iterdir()) == ["input.txt"]


def test_datamodule_on_an_empty_data_folder_gives_nanogpts_split(tmp_path):
    dm = LanguageModelDataModule(data_dir=str(tmp_path / "nothing"), cache_dir=str(tmp_path / "cache"))
    dm.setup("fit")
    assert dm.vocab_size == 65
    assert (len(dm._splits["train"]), len(dm._splits["val"])) == (1_003_854, 111_540)


@pytest.mark.slow
def test_main_command_trains_offline_without_data(tmp_path):
    """`python train.py` from a fresh folder: no ZOO_DATA_DIR, no ./data, and any network access would fail (a
    proxy on a closed port). It trains on the shipped copy and writes a checkpoint."""
    env = {k: v for k, v in os.environ.items() if k not in ("ZOO_DATA_DIR", "ZOO_CACHE_DIR", "ZOO_OFFLINE")}
    env.update(HYDRA_FULL_ERROR="0", http_proxy="http://127.0.0.1:9", https_proxy="http://127.0.0.1:9")
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "train.py"),
            "trainer.max_steps=2",
            "trainer.val_check_interval=2",
            "trainer.limit_val_batches=1",
            "validate=false",
            "test=false",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert_ok(result)
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 2
    cached = tmp_path / "data" / "cache" / "builtin" / "tinyshakespeare" / "input.txt"
    assert hashlib.sha256(cached.read_bytes()).hexdigest() == CANONICAL.sha256
