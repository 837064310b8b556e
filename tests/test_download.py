"""data.download: missing files fetched over HTTP from a real server on loopback, checked by sha256, cached
atomically in the data folder; refused when corrupted; never fetched when offline or told not to."""

from __future__ import annotations

import functools
import hashlib
import http.server
import socket
import threading
from pathlib import Path

import pytest

from zoo.data import ImageClassificationDataModule
from zoo.data.sources import DATASETS, DatasetFile, resolve_dataset


class Server:
    """http.server in a thread, serving one folder and counting the GET requests it answers."""

    def __init__(self, root: Path) -> None:
        self.requests: list[str] = []
        outer = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's naming)
                outer.requests.append(self.path)
                super().do_GET()

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture()
def served(tmp_path, shakespeare_path):
    """The real tiny shakespeare (canonical sha256) and a copy with one byte changed, over HTTP."""
    root = tmp_path / "www"
    root.mkdir()
    real = shakespeare_path.read_bytes()
    (root / "input.txt").write_bytes(real)
    (root / "corrupt.txt").write_bytes(real[:1000] + b"#" + real[1001:])
    server = Server(root)
    yield server
    server.close()


@pytest.fixture()
def online(monkeypatch):
    monkeypatch.delenv("ZOO_OFFLINE", raising=False)  # conftest sets it for every other test


def register(monkeypatch, name: str, url: str, relpath: str = "mirror/input.txt") -> DatasetFile:
    canonical = DATASETS["tinyshakespeare"][0].sha256
    file = DatasetFile(relpath, url, canonical)
    monkeypatch.setitem(DATASETS, name, [file])
    return file


def test_auto_fetches_checks_and_caches_the_file(tmp_path, served, online, monkeypatch, shakespeare_path):
    register(monkeypatch, "mirror", f"{served.url}/input.txt")
    data = tmp_path / "data"
    (path,) = resolve_dataset("mirror", data, download_missing="auto")
    assert path == data / "mirror" / "input.txt"
    assert path.read_bytes() == shakespeare_path.read_bytes()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == DATASETS["tinyshakespeare"][0].sha256
    assert sorted(p.name for p in path.parent.iterdir()) == ["input.txt"]  # the temporary file was renamed
    assert served.requests == ["/input.txt"]
    resolve_dataset("mirror", data, download_missing=True)
    assert served.requests == ["/input.txt"]  # cached: not fetched again


def test_corrupted_download_is_refused_and_nothing_cached(tmp_path, served, online, monkeypatch):
    register(monkeypatch, "mirror", f"{served.url}/corrupt.txt")
    data = tmp_path / "data"
    with pytest.raises(ValueError, match=r"corrupt\.txt has sha256 [0-9a-f]{64}, expected 86c4e6aa.*not saved"):
        resolve_dataset("mirror", data, download_missing="auto")
    assert served.requests == ["/corrupt.txt"]
    assert list((data / "mirror").iterdir()) == []  # neither the file nor a partial temporary one


def test_http_error_and_unreachable_server_are_one_clear_error(tmp_path, served, online, monkeypatch):
    register(monkeypatch, "mirror", f"{served.url}/no-such-file.txt")
    with pytest.raises(FileNotFoundError) as info:
        resolve_dataset("mirror", tmp_path / "data", download_missing="auto")
    message = str(info.value)
    assert str(tmp_path / "data" / "mirror" / "input.txt") in message and "404" in message
    assert "ZOO_DATA_DIR" in message
    with socket.socket() as s:  # a port nobody listens on: what an offline machine sees
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    register(monkeypatch, "mirror", f"http://127.0.0.1:{closed}/input.txt")
    with pytest.raises(FileNotFoundError, match=r"looked for .*mirror/input\.txt, and downloading it failed .*refused"):
        resolve_dataset("mirror", tmp_path / "data", download_missing="auto")
    assert list((tmp_path / "data" / "mirror").iterdir()) == []


def test_offline_or_download_false_never_fetches(tmp_path, served, monkeypatch):
    register(monkeypatch, "mirror", f"{served.url}/input.txt")
    monkeypatch.setenv("ZOO_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match=r"mirror/input\.txt \(ZOO_OFFLINE is set.*ZOO_DATA_DIR"):
        resolve_dataset("mirror", tmp_path / "data", download_missing="auto")
    monkeypatch.delenv("ZOO_OFFLINE")
    with pytest.raises(FileNotFoundError, match=r"data\.download=false.*pass data\.download=true"):
        resolve_dataset("mirror", tmp_path / "data", download_missing=False)
    assert served.requests == []
    monkeypatch.setenv("ZOO_OFFLINE", "1")
    resolve_dataset("mirror", tmp_path / "data", download_missing="true")  # true: asked for explicitly
    assert served.requests == ["/input.txt"]


def test_bad_download_value_is_named(tmp_path):
    with pytest.raises(ValueError, match="data.download must be auto, true or false, got 'sometimes'"):
        resolve_dataset("tinyshakespeare", tmp_path, download_missing="sometimes")


def test_datamodule_downloads_mnist_from_the_mirror(tmp_path, data_dir, online, monkeypatch):
    """Through the whole data path: the MNIST files of the data folder served over HTTP with their true sha256,
    fetched into an empty data folder by the DataModule, and read as the originals are."""
    server = Server(data_dir / "mnist")
    try:
        files = [
            DatasetFile(
                f.relpath,
                f"{server.url}/{Path(f.relpath).name}",
                hashlib.sha256((data_dir / f.relpath).read_bytes()).hexdigest(),
            )
            for f in DATASETS["mnist"]
        ]
        monkeypatch.setitem(DATASETS, "mnist", files)
        fresh = tmp_path / "fresh"
        dm = ImageClassificationDataModule(
            dataset="mnist", data_dir=str(fresh), split_sizes=[0.5, 0.25, 0.25], batch_size=8, download="auto"
        )
        dm.setup("fit")
        assert sorted(server.requests) == sorted(f"/{Path(f.relpath).name}" for f in files)
        for f in files:
            assert (fresh / f.relpath).read_bytes() == (data_dir / f.relpath).read_bytes()
        local = ImageClassificationDataModule(
            dataset="mnist", data_dir=str(data_dir), split_sizes=[0.5, 0.25, 0.25], batch_size=8
        )
        local.setup("fit")
        assert dm._splits["val"].indices == local._splits["val"].indices
        x, _ = next(iter(dm.val_dataloader()))
        assert x.equal(next(iter(local.val_dataloader()))[0])
    finally:
        server.close()
