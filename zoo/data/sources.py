"""Where dataset files come from, in this order: the data directory (`ZOO_DATA_DIR`, else ./data), a copy shipped
inside the package (tiny shakespeare), then a download from the canonical URL, checked by sha256, as `data.download`
allows: "auto" unless `ZOO_OFFLINE=1` is set, true always, false never.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

from .atomic import replacing
from .builtin import BUILTIN_FILES, materialize_builtin


@dataclass(frozen=True)
class DatasetFile:
    relpath: str  # path below the data directory, the layout docs/data.md describes
    url: str
    sha256: str


def _files(folder: str, base_url: str, sha256_of_name: dict[str, str]) -> list[DatasetFile]:
    return [DatasetFile(f"{folder}/{name}", f"{base_url}/{name}", sha) for name, sha in sha256_of_name.items()]


# tiny shakespeare (char-rnn's input.txt); also shipped inside the package (zoo/data/builtin).
_CHAR_RNN = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data"
DATASETS: dict[str, list[DatasetFile]] = {
    "tinyshakespeare": _files(
        "tinyshakespeare",
        f"{_CHAR_RNN}/tinyshakespeare",
        {
            "input.txt": "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
        },
    ),
}
# MNIST (IDX, gzipped) from the TensorFlow mirror of yann.lecun.com; sha256 of the .gz files (md5 in mnist/SOURCE.md).
_MNIST = "https://storage.googleapis.com/cvdf-datasets/mnist"
DATASETS["mnist"] = _files(
    "mnist",
    _MNIST,
    {
        "t10k-images-idx3-ubyte.gz": "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
        "t10k-labels-idx1-ubyte.gz": "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
    },
)
DATASETS["mnist_train"] = _files(
    "mnist",
    _MNIST,
    {
        "train-images-idx3-ubyte.gz": "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
        "train-labels-idx1-ubyte.gz": "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
    },
)
# Multi30k task 1 raw text (multi30k/dataset on GitHub, commit a3d2e0d, data/task1/raw); sha256 of the .gz files.
_MULTI30K = "https://raw.githubusercontent.com/multi30k/dataset/a3d2e0d26b56f3846f66a952536ffed4e401d05a/data/task1/raw"
DATASETS["multi30k"] = _files(
    "multi30k",
    _MULTI30K,
    {
        "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
        "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
        "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
        "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
        "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
        "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    },
)
# CIFAR-10 python archive (md5 c58f30108f718f92721af3b95e74349a, as torchvision pins it).
DATASETS["cifar10"] = _files(
    "cifar10",
    "https://www.cs.toronto.edu/~kriz",
    {
        "cifar-10-python.tar.gz": "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce",
    },
)
# WikiText-2 raw valid/test (byte-identical to the wikitext-2-raw-v1.zip members), from the commit in SOURCE.md.
_WIKITEXT2 = (
    "https://raw.githubusercontent.com/DRAGNLabs/LLMHumanModeling/67cb89ec83ca316877b9101d6b8b1227aa7cf8e4/data"
)
DATASETS["wikitext2"] = _files(
    "wikitext2",
    _WIKITEXT2,
    {
        "wiki.valid.raw": "4cd0f6876d07a413aa911261ff6d363c72d757d47f0fdd6015702014c89cb9c7",
        "wiki.test.raw": "173c87a53759e0201f33e0ccf978e510c2042d7f2cb78229d9a50d79b9e7dd08",
    },
)
# GLUE SST-2 TSVs (train, dev, unlabeled test), from the commit sst2/SOURCE.md names.
_SST2 = (
    "https://raw.githubusercontent.com/tatsu-lab/mlm_inductive_bias/2d99e2477293036949ba356c88513729244dc1f9/"
    "finetuning/data/SST-2"
)
DATASETS["sst2"] = _files(
    "sst2",
    _SST2,
    {
        "train.tsv": "48eac26399f8456935f81dd9e3a745c1430adb6c62e233ccfe22db4a0d15d1d1",
        "dev.tsv": "54a9c12c77e402fc14d6a66a506f24d999f596b0176eb777c972cccc2f9cc4b0",
        "test.tsv": "69a938605609b3e6663b4487918fe1565eb293734e6e520d0366d1d412fd2a13",
    },
)

CHUNK = 1 << 16


class DownloadError(OSError):
    """The file could not be fetched (no network, unknown host, HTTP error, connection cut)."""


def _received(url: str, timeout: float):
    """(Content-Length or None, chunk) for each chunk of the response; every network failure becomes one
    DownloadError naming the URL."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            size = response.headers.get("Content-Length")
            size = int(size) if size and size.isdigit() else None
            yield size, b""
            for chunk in iter(lambda: response.read(CHUNK), b""):
                yield size, chunk
    except urllib.error.HTTPError as error:
        raise DownloadError(f"{url}: HTTP {error.code} {error.reason}") from error
    except (urllib.error.URLError, http.client.HTTPException, OSError) as error:
        reason = getattr(error, "reason", None) or error
        raise DownloadError(f"{url}: {reason}") from error


def fetch(url: str, sha256: str, target: Path, *, timeout: float = 60.0) -> None:
    """Download `url` to `target` (atomically, with a progress bar on a terminal's stderr) and keep it only if its
    sha256 is `sha256`: DownloadError when the server cannot be reached or answers with an error, ValueError when the
    checksum differs; a refused or interrupted download leaves nothing behind."""
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
    with replacing(target) as tmp:
        digest = hashlib.sha256()
        with open(tmp, "wb") as out, Progress(*columns, transient=True, disable=not sys.stderr.isatty()) as bar:
            task = None
            # Only the network side is a DownloadError: a failed write stays the OSError it is.
            for size, chunk in _received(url, timeout):
                if task is None:
                    task = bar.add_task(f"downloading {target.name}", total=size)
                out.write(chunk)
                digest.update(chunk)
                bar.advance(task, len(chunk))
        got = digest.hexdigest()
        if got != sha256:
            raise ValueError(
                f"download of {url} has sha256 {got}, expected {sha256}; not saved (a changed or "
                "corrupted file upstream, or a proxy page: fetch it by hand and check it)"
            )


DOWNLOAD_MODES = ("auto", True, False)


def data_dirs(data_dir: str | Path | None = None, cache_dir: str | Path | None = None) -> tuple[Path, Path]:
    """The data and cache directories: the given ones, else ZOO_DATA_DIR (./data) and ZOO_CACHE_DIR (<data>/cache)."""
    root = Path(data_dir or os.environ.get("ZOO_DATA_DIR", "data"))
    return root, Path(cache_dir or os.environ.get("ZOO_CACHE_DIR") or root / "cache")


def offline() -> bool:
    return os.environ.get("ZOO_OFFLINE", "").strip().lower() in ("1", "true", "yes")


def download_mode(value) -> str | bool:
    """The `data.download` option as "auto", True or False (the strings "true"/"false" too, from a CLI)."""
    if isinstance(value, str) and value.strip().lower() in ("auto", "true", "false"):
        value = {"auto": "auto", "true": True, "false": False}[value.strip().lower()]
    if value not in DOWNLOAD_MODES or not isinstance(value, (bool, str)):
        raise ValueError(f"data.download must be auto, true or false, got {value!r}")
    return value


def resolve_dataset(
    name: str,
    data_dir: str | Path | None = None,
    *,
    download_missing: str | bool = False,
    cache_dir: str | Path | None = None,
) -> list[Path]:
    """Local paths of a named dataset's files, found or fetched (see the module docstring)."""
    if name not in DATASETS:
        raise ValueError(
            f"unknown dataset '{name}'; known: {', '.join(DATASETS)} (or point the data config at your own files)"
        )
    mode = download_mode(download_missing)
    root, cache = data_dirs(data_dir, cache_dir)
    return [_locate(name, file, root, cache, mode) for file in DATASETS[name]]


def _locate(name: str, file: DatasetFile, root: Path, cache: Path, mode: str | bool) -> Path:
    path = root / file.relpath
    if path.is_file():
        return path
    if file.relpath in BUILTIN_FILES:
        return materialize_builtin(file.relpath, file.sha256, cache)
    provide = f"Set ZOO_DATA_DIR to a folder holding {file.relpath} (or copy the file to that path)"
    if mode is False or (mode == "auto" and offline()):
        why = "data.download=false" if mode is False else "ZOO_OFFLINE is set"
        raise FileNotFoundError(
            f"dataset '{name}' not found: looked for {path.resolve()} ({why}, so it was not "
            f"downloaded). {provide}, or pass data.download=true to fetch it from {file.url}"
        )
    try:
        fetch(file.url, file.sha256, path)
    except DownloadError as error:
        raise FileNotFoundError(
            f"dataset '{name}' not found: looked for {path.resolve()}, and downloading it failed ({error}). {provide}"
        ) from error
    except PermissionError as error:
        raise FileNotFoundError(
            f"dataset '{name}' not found: looked for {path.resolve()}, and the download "
            f"cannot be saved there ({error}). Point ZOO_DATA_DIR at a writable folder"
        ) from error
    return path
