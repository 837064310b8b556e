"""Shared test set-up: real data (the full datasets, or small real fixtures), a private cache, no network, and
helpers to run the entry scripts.

Which data the tests read:
- ZOO_TEST_FIXTURES=1: the fixtures in tests/fixtures/data, whatever else is set (to check the hermetic mode);
- else ZOO_DATA_DIR when set (CI exports ../shared/data);
- else ../shared/data beside the checkout when it exists;
- else the fixtures. Tests marked `full_data` (sizes and figures only the full datasets have) are then skipped.
Tiny shakespeare always resolves: missing from the data folder, it comes from the copy shipped in the package.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "data"

if os.environ.get("ZOO_TEST_FIXTURES") == "1":
    os.environ["ZOO_DATA_DIR"] = str(FIXTURES)
elif "ZOO_DATA_DIR" not in os.environ:
    full = ROOT.parent / "shared" / "data"
    os.environ["ZOO_DATA_DIR"] = str(full if full.is_dir() else FIXTURES)
ON_FIXTURES = Path(os.environ["ZOO_DATA_DIR"]).resolve() == FIXTURES.resolve()
# No test touches the internet: `data.download=auto` (the configs' default) does not fetch with ZOO_OFFLINE=1.
os.environ["ZOO_OFFLINE"] = "1"
os.environ.setdefault("WANDB_MODE", "offline")


def pytest_report_header(config) -> str:
    return f"data: {os.environ['ZOO_DATA_DIR']}" + (" (small fixtures; full_data tests skipped)" if ON_FIXTURES else "")


def pytest_runtest_setup(item) -> None:
    if ON_FIXTURES and item.get_closest_marker("full_data") is not None:
        pytest.skip("needs the full datasets: set ZOO_DATA_DIR to them (CI: ../shared/data); running on the fixtures")


@pytest.fixture(scope="session")
def data_dir() -> Path:
    path = Path(os.environ["ZOO_DATA_DIR"])
    if not path.is_dir():
        pytest.fail(f"ZOO_DATA_DIR={path} is not a folder; unset it to use the fixtures (CI uses ../shared/data)")
    return path


@pytest.fixture(scope="session")
def shakespeare_path(data_dir, cache_dir) -> Path:
    """tiny shakespeare's input.txt: the data folder's copy, else the one shipped in the package."""
    from zoo.data.sources import resolve_dataset

    return resolve_dataset("tinyshakespeare", data_dir, cache_dir=cache_dir)[0]


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
    assert result.returncode == 0, (
        f"exit {result.returncode}\nSTDOUT:\n{result.stdout[-3000:]}\nSTDERR:\n{result.stderr[-5000:]}"
    )


def assert_one_line_error(result, *fragments: str) -> None:
    """Non-zero exit, the message names the problem, and no traceback is shown."""
    assert result.returncode != 0, result.stdout[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    for fragment in fragments:
        assert fragment in result.stderr, f"{fragment!r} not in:\n{result.stderr[-3000:]}"


@pytest.fixture(autouse=True)
def no_hydra_state_left_behind():
    """Tests that compose configs set Hydra's global HydraConfig; clear it afterwards so that no later in-process
    test sees a "running" (multi)run that does not exist."""
    yield
    from hydra.core.hydra_config import HydraConfig

    HydraConfig.instance().cfg = None
