"""Where dataset files come from: a local folder (`ZOO_DATA_DIR`) or their canonical URL, checked by sha256."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class DatasetFile:
    relpath: str  # path below the data directory, the layout of ../shared/data
    url: str
    sha256: str


DATASETS: dict[str, list[DatasetFile]] = {
    "tinyshakespeare": [
        DatasetFile(
            "tinyshakespeare/input.txt",
            "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
            "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
        )
    ],
}


def default_data_dir() -> Path:
    return Path(os.environ.get("ZOO_DATA_DIR", "data"))


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def download(file: DatasetFile, target: Path) -> None:
    """Fetch `file.url` to `target`, refusing it unless its sha256 matches."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as tmp:
        with urllib.request.urlopen(file.url, timeout=60) as response:
            shutil.copyfileobj(response, tmp)
    got = sha256_of(Path(tmp.name))
    if got != file.sha256:
        os.unlink(tmp.name)
        raise ValueError(f"download of {file.url} has sha256 {got}, expected {file.sha256}; not saved")
    os.replace(tmp.name, target)


def resolve_dataset(name: str, data_dir: str | Path | None = None, *, download_missing: bool = False) -> list[Path]:
    """Local paths of a named dataset's files, downloading them first when asked to."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset '{name}'; known: {', '.join(DATASETS)} (or give your own text files)")
    root = Path(data_dir) if data_dir is not None else default_data_dir()
    paths = []
    for file in DATASETS[name]:
        path = root / file.relpath
        if not path.is_file():
            if not download_missing:
                raise FileNotFoundError(
                    f"dataset '{name}' not found: looked for {path.resolve()}. Set ZOO_DATA_DIR to a folder holding "
                    f"{file.relpath}, or pass data.download=true to fetch it from {file.url}"
                )
            download(file, path)
        paths.append(path)
    return paths
