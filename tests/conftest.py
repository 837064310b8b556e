"""Shared test set-up: real data (the full datasets, or small real fixtures), a private cache, no network, and
helpers to run the entry scripts.

Which data the tests read:
- ZOO_TEST_FIXTURES=1: the fixtures in tests/fixtures/data, whatever else is set (to check the hermetic mode);
- else ZOO_DATA_DIR when set (CI points it at the full datasets);
- else the fixtures. Tests marked `full_data` (sizes and figures only the full datasets have) are then skipped.
Tiny shakespeare always resolves: missing from the data folder, it comes from the copy shipped in the package.

What the tests may touch: their temporary directories only. Each test runs in a directory of its own (the start
directory of the scripts it runs, so their ./logs and ./data/cache land there), caches that libraries keep under the
home directory are pointed into the session's temporary directory, and the session fails if the checkout's own state
(logs/, data/, outputs, anything outside the source tree) changed while it ran.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "data"

if os.environ.get("ZOO_TEST_FIXTURES") == "1":
    os.environ["ZOO_DATA_DIR"] = str(FIXTURES)
elif "ZOO_DATA_DIR" not in os.environ:
    # Nothing outside the environment is looked for: without ZOO_DATA_DIR the tests read the committed slices.
    os.environ["ZOO_DATA_DIR"] = str(FIXTURES)
ON_FIXTURES = Path(os.environ["ZOO_DATA_DIR"]).resolve() == FIXTURES.resolve()
# No test touches the internet: `data.download=auto` (the configs' default) does not fetch with ZOO_OFFLINE=1.
os.environ["ZOO_OFFLINE"] = "1"
os.environ.setdefault("WANDB_MODE", "offline")

# Library caches and settings that default to the home directory (pip, Hugging Face, torch hub, matplotlib, wandb,
# torch.compile) go to a folder of this session, so no test reads a warm cache or leaves one behind.
_SESSION_HOME = Path(tempfile.mkdtemp(prefix="zoo-test-home-"))
for _variable, _folder in {
    "XDG_CACHE_HOME": "cache",
    "XDG_CONFIG_HOME": "config",
    "HF_HOME": "huggingface",
    "TORCH_HOME": "torch",
    "MPLCONFIGDIR": "matplotlib",
    "WANDB_DIR": "wandb",
    "WANDB_CACHE_DIR": "wandb-cache",
    "WANDB_CONFIG_DIR": "wandb-config",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "TRITON_CACHE_DIR": "triton",
}.items():
    os.environ[_variable] = str(_SESSION_HOME / _folder)

# Under pytest-xdist (`-n 2`) the workers share the cores: each worker's torch, and the scripts it starts, get their
# share of them instead of one thread per core each (two processes at full width thrash 2 cores).
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _share = str(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = _share

# The checkout's user state: what a run of the README's commands writes there, which no test may read or change.
_SOURCE_CACHES = {".git", ".venv", "venv", ".pytest_cache", ".ruff_cache", "__pycache__"}
_USER_STATE = {"logs", "data", "outputs", "multirun", "wandb", "lightning_logs"}


def tree_state(root: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file under `root` outside git's and Python's own caches, by path."""
    state = {}
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = [d for d in subfolders if d not in _SOURCE_CACHES and not d.endswith(".egg-info")]
        for name in files:
            path = Path(folder, name)
            try:
                stat = path.stat()
            except FileNotFoundError:  # a dangling link
                continue
            state[str(path)] = (stat.st_size, stat.st_mtime_ns)
    return state


def _watched() -> dict[str, tuple[int, int]]:
    """The checkout, and the data directory where it lies outside it (the full datasets: read, never written)."""
    state = tree_state(ROOT)
    data = Path(os.environ["ZOO_DATA_DIR"]).resolve()
    if data.is_dir() and not data.is_relative_to(ROOT.resolve()):
        state.update(tree_state(data))
    return state


def _is_user_state(path: str) -> bool:
    inside = Path(path).resolve().is_relative_to(ROOT.resolve())
    return not inside or Path(path).relative_to(ROOT).parts[0] in _USER_STATE


def pytest_sessionstart(session) -> None:
    session.config._zoo_watched_state = _watched()


def pytest_sessionfinish(session, exitstatus) -> None:
    if _script_server is not None:
        _script_server.stop()
    before, after = session.config._zoo_watched_state, _watched()
    # Files that appeared or went anywhere, and any change to the user's state or the data; a source file edited
    # while the suite runs is the developer's doing, not a test's.
    changed = sorted(
        p
        for p in before.keys() | after.keys()
        if (p in before) != (p in after) or (_is_user_state(p) and before[p] != after[p])
    )
    if changed:
        listing = "\n  ".join(changed[:20]) + ("\n  ..." if len(changed) > 20 else "")
        print(f"\nFAILED: the test session changed {len(changed)} file(s) outside its temporary folders:\n  {listing}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_report_header(config) -> str:
    return f"data: {os.environ['ZOO_DATA_DIR']}" + (" (small fixtures; full_data tests skipped)" if ON_FIXTURES else "")


# Datasets that only a data directory holds (tiny shakespeare ships in the package, the same text either way).
_DATASET_NAMES = re.compile(r"mnist|sst2|sst-2|glue|multi30k|wikitext|model=(bert|vit|cnn|transformer)\b", re.I)


def _reads_a_dataset(item) -> bool:
    """The test or a fixture it uses asks for the data directory or names one of its datasets."""
    if "data_dir" in getattr(item, "fixturenames", ()):
        return True
    functions = [getattr(item, "function", None)]
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        functions += [d.func for d in (info.name2fixturedefs.get(name, ()) if info else ())]
    texts = [str(getattr(getattr(item, "callspec", None), "params", ""))]
    for function in filter(None, functions):
        with contextlib.suppress(OSError, TypeError):
            texts.append(inspect.getsource(function))
    return any(_DATASET_NAMES.search(text) for text in texts)


def pytest_collection_modifyitems(config, items) -> None:
    """Tests that read a dataset of the data directory carry the `data` marker: `.ci/run` runs them a second time
    on the fixtures (`-m data`), as a machine without a data directory runs them."""
    for item in items:
        if _reads_a_dataset(item):
            item.add_marker(pytest.mark.data)


def pytest_runtest_setup(item) -> None:
    if ON_FIXTURES and item.get_closest_marker("full_data") is not None:
        pytest.skip("needs the full datasets: set ZOO_DATA_DIR to them ; running on the fixtures")


@pytest.fixture(scope="session")
def data_dir() -> Path:
    path = Path(os.environ["ZOO_DATA_DIR"])
    if not path.is_dir():
        pytest.fail(f"ZOO_DATA_DIR={path} is not a folder; point it at the datasets, or unset it to use the fixtures")
    return path


@pytest.fixture(scope="session")
def shakespeare_path(data_dir, cache_dir) -> Path:
    """tiny shakespeare's input.txt: the data folder's copy, else the one shipped in the package."""
    from zoo.data.sources import resolve_dataset

    return resolve_dataset("tinyshakespeare", data_dir, cache_dir=cache_dir)[0]


@pytest.fixture(scope="session", autouse=True)
def cache_dir(tmp_path_factory) -> Path:
    """Tokenizers and token memmaps are built once per test session, in a private folder (never a ZOO_CACHE_DIR
    of the user's: no test may pass only because a cache was warm)."""
    path = tmp_path_factory.mktemp("zoo-cache")
    os.environ["ZOO_CACHE_DIR"] = str(path)
    return path


@pytest.fixture(scope="session", autouse=True)
def session_start_directory(tmp_path_factory):
    """Session- and module-scoped fixtures (checkpoints trained once and shared) also start outside the checkout."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path_factory.mktemp("session-cwd"))
        yield


@pytest.fixture(autouse=True)
def start_directory(tmp_path_factory, monkeypatch) -> Path:
    """Each test starts in an empty directory of its own, never the checkout: what a script writes under ./logs or
    ./data/cache of its start directory stays in the test's temporary space."""
    path = tmp_path_factory.mktemp("cwd")
    monkeypatch.chdir(path)
    return path


# A GPT run of a few steps with nothing around it (no validation, test, samples, progress bar or summary); add
# trainer.max_steps and an optimized_metric.
QUIET_SHORT_RUN = [
    "trainer.val_check_interval=100000",
    "trainer.num_sanity_val_steps=0",
    "validate=false",
    "test=false",
    "model.num_samples=0",
    "callbacks.progress_bar=null",
    "callbacks.model_summary=null",
]


class ScriptServer:
    """The client of tests/script_server.py: runs an entry script in a child forked from a process that has
    imported torch and Lightning already (why, and what differs from a fresh interpreter: that file's docstring)."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="zoo-script-server-"))
        self.socket_path = str(self.folder / "socket")
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "script_server.py"), self.socket_path],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError(f"tests/script_server.py did not start (exit {self.process.wait()})")
        self.runs = 0

    def _send(self, request: dict) -> dict:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(self.socket_path)
            conn.sendall(json.dumps(request).encode())
            conn.shutdown(socket.SHUT_WR)
            reply = b"".join(iter(lambda: conn.recv(65536), b""))
        return json.loads(reply) if reply else {}

    def run(self, argv: list[str], *, cwd: Path, env: dict, timeout: float) -> subprocess.CompletedProcess:
        self.runs += 1
        files = {name: str(self.folder / f"{self.runs}.{name}") for name in ("stdout", "stderr", "status")}
        pid = self._send({"argv": argv, "cwd": str(cwd), "env": env, **files})["pid"]
        status, deadline = Path(files["status"]), time.monotonic() + timeout
        while not status.exists():
            if self.process.poll() is not None:
                raise RuntimeError(f"tests/script_server.py ended (exit {self.process.returncode})")
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                raise subprocess.TimeoutExpired([sys.executable, *argv], timeout)
            time.sleep(0.01)
        out, err = (Path(files[name]).read_text(errors="replace") for name in ("stdout", "stderr"))
        return subprocess.CompletedProcess([sys.executable, *argv], int(status.read_text()), out, err)

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self._send({"stop": True})
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        if self.process.poll() is None:
            self.process.kill()
        shutil.rmtree(self.folder, ignore_errors=True)


_script_server: ScriptServer | None = None


def run_script(script: str, *args: str, cwd: Path | None = None, env: dict | None = None, timeout: int = 600):
    """Run one of the top-level scripts like a user would, from the test's start directory unless `cwd` is given;
    returns the CompletedProcess. The process is forked from tests/script_server.py, which has the heavy imports
    done; ZOO_TEST_SCRIPT_SERVER=0 starts a fresh interpreter for every run instead."""
    full_env = {**os.environ, "HYDRA_FULL_ERROR": "0", **(env or {})}
    return _run_forked([str(ROOT / script), *args], cwd=cwd, env=full_env, timeout=timeout)


def run_module(module: str, *args: str, cwd: Path | None = None, env: dict | None = None, timeout: int = 600):
    """`python -m module args...` as a user types it, forked from the script server like `run_script`: the
    commands that start no training themselves (zoo.prepare, zoo.lab) spend most of their time importing."""
    full_env = {**os.environ, **(env or {})}
    return _run_forked(["-m", module, *args], cwd=cwd, env=full_env, timeout=timeout)


def _run_forked(argv: list[str], *, cwd: Path | None, env: dict, timeout: int) -> subprocess.CompletedProcess:
    global _script_server
    if os.environ.get("ZOO_TEST_SCRIPT_SERVER", "1") == "0":
        command = [sys.executable, *argv]
        return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if _script_server is None:
        _script_server = ScriptServer()
    return _script_server.run(argv, cwd=Path(cwd or os.getcwd()), env=env, timeout=timeout)


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


# Models trained once per session and shared, and the entries run in the test process (tests/trained.py).
pytest_plugins = ["trained"]
