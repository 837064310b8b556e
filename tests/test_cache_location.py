"""Caches go where the README says whatever the start directory: with ZOO_DATA_DIR set and no ZOO_CACHE_DIR,
tokenizers and token files land in the data folder's cache/, and a run started anywhere else writes nothing there.

The data folder here is a temporary copy of the fixtures: the real one (ZOO_DATA_DIR of the session) is never
written, and the session's private ZOO_CACHE_DIR is taken out of the environment on purpose."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from conftest import FIXTURES, QUIET_SHORT_RUN, ROOT, assert_ok

CONF = ROOT / "zoo" / "conf"
DATA_CONFIGS = sorted(p.stem for p in (CONF / "data").glob("*.yaml"))


@pytest.fixture
def data_copy(tmp_path) -> Path:
    """A writable data folder: the small fixtures, copied (tiny shakespeare comes from the package's copy)."""
    return Path(shutil.copytree(FIXTURES, tmp_path / "data"))


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


@pytest.mark.slow
def test_a_run_started_elsewhere_writes_its_caches_beside_the_data_only(tmp_path, data_copy):
    start = tmp_path / "start"
    start.mkdir()
    env = {**os.environ, "ZOO_DATA_DIR": str(data_copy), "HYDRA_FULL_ERROR": "0"}
    env.pop("ZOO_CACHE_DIR")  # the default under test; the session's private cache would hide it
    args = [
        *QUIET_SHORT_RUN,
        "trainer.max_steps=1",
        "optimized_metric=train/loss",
        "model.net.name=gpt-nano",
        "data.block_size=16",
        f"paths.log_dir={tmp_path / 'logs'}",
    ]
    result = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *args],
        cwd=start,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert_ok(result)
    assert files_under(start) == [] and list(start.iterdir()) == []  # not even an empty data/cache folder
    cached = files_under(data_copy / "cache")
    assert any(name.endswith("/manifest.json") for name in cached), cached  # the encoded tokens, as shards
    assert "builtin/tinyshakespeare/input.txt" in cached  # the package's copy of the text, decompressed once
    assert list((tmp_path / "logs").rglob("last.ckpt"))  # the run itself went where paths.log_dir said


def compose_data(name: str, start: Path):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[f"data={name}"])
    OmegaConf.update(cfg, "paths.root_dir", str(start), force_add=True)  # what ${zoo.start_dir:} gives
    return cfg


@pytest.mark.parametrize("name", DATA_CONFIGS)
def test_every_data_config_caches_in_the_data_folder_or_zoo_cache_dir(name, tmp_path, monkeypatch):
    data, start = tmp_path / "data", tmp_path / "start"
    monkeypatch.setenv("ZOO_DATA_DIR", str(data))
    monkeypatch.delenv("ZOO_CACHE_DIR")
    cfg = compose_data(name, start)
    assert Path(cfg.paths.cache_dir) == data / "cache"
    cache = cfg.data.get("cache_dir")  # a DataModule without the option falls back to the same place
    assert cache is None or Path(cache) == data / "cache"

    monkeypatch.setenv("ZOO_CACHE_DIR", str(tmp_path / "elsewhere"))
    cfg = compose_data(name, start)
    assert cfg.data.get("cache_dir") in (None, str(tmp_path / "elsewhere"))

    monkeypatch.delenv("ZOO_DATA_DIR")  # nothing set: ./data/cache of the start directory, as the README says
    monkeypatch.delenv("ZOO_CACHE_DIR")
    assert Path(compose_data(name, start).paths.cache_dir) == start / "data" / "cache"
