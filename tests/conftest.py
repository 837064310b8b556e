"""Shared test set-up: real data from ZOO_DATA_DIR, a private cache, and helpers to run the entry scripts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

if "ZOO_DATA_DIR" not in os.environ and (ROOT.parent / "shared" / "data").is_dir():
    os.environ["ZOO_DATA_DIR"] = str(ROOT.parent / "shared" / "data")
os.environ.setdefault("WANDB_MODE", "offline")


@pytest.fixture(scope="session")
def data_dir() -> Path:
    path = Path(os.environ.get("ZOO_DATA_DIR", ROOT / "data"))
    if not (path / "tinyshakespeare" / "input.txt").is_file():
        pytest.fail(f"tiny shakespeare not found under {path}; set ZOO_DATA_DIR (CI uses ../shared/data)")
    return path


@pytest.fixture(scope="session", autouse=True)
def cache_dir(tmp_path_factory) -> Path:
    """Tokenizers and token memmaps are built once per test session, in a private folder."""
    path = Path(os.environ.get("ZOO_CACHE_DIR") or tmp_path_factory.mktemp("zoo-cache"))
    os.environ["ZOO_CACHE_DIR"] = str(path)
    return path


def run_script(script: str, *args: str, cwd: Path = ROOT, env: dict | None = None, timeout: int = 600):
    """Run one of the top-level scripts like a user would; returns the CompletedProcess."""
    full_env = {**os.environ, "HYDRA_FULL_ERROR": "0", **(env or {})}
    return subprocess.run(
        [sys.executable, str(ROOT / script), *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_ok(result) -> None:
    assert result.returncode == 0, f"exit {result.returncode}\nSTDOUT:\n{result.stdout[-3000:]}\nSTDERR:\n{result.stderr[-5000:]}"


def assert_one_line_error(result, *fragments: str) -> None:
    """Non-zero exit, the message names the problem, and no traceback is shown."""
    assert result.returncode != 0, result.stdout[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    for fragment in fragments:
        assert fragment in result.stderr, f"{fragment!r} not in:\n{result.stderr[-3000:]}"
