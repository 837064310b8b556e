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
# MNIST (IDX, gzipped) from the TensorFlow mirror of yann.lecun.com; sha256 of the .gz files (md5 in mnist/SOURCE.md).
DATASETS["mnist"] = [DatasetFile(f"mnist/{f}", f"https://storage.googleapis.com/cvdf-datasets/mnist/{f}", h) for f, h in (("t10k-images-idx3-ubyte.gz", "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6"), ("t10k-labels-idx1-ubyte.gz", "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6"))]
DATASETS["mnist_train"] = [DatasetFile(f"mnist/{f}", f"https://storage.googleapis.com/cvdf-datasets/mnist/{f}", h) for f, h in (("train-images-idx3-ubyte.gz", "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609"), ("train-labels-idx1-ubyte.gz", "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c"))]
# Multi30k task 1 raw text (multi30k/dataset on GitHub, commit a3d2e0d, data/task1/raw); sha256 of the .gz files.
_MULTI30K = "https://raw.githubusercontent.com/multi30k/dataset/a3d2e0d26b56f3846f66a952536ffed4e401d05a/data/task1/raw"
DATASETS["multi30k"] = [DatasetFile(f"multi30k/{f}", f"{_MULTI30K}/{f}", h) for f, h in (
    ("train.de.gz", "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6"),
    ("train.en.gz", "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f"),
    ("val.de.gz", "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a"),
    ("val.en.gz", "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28"),
    ("test_2016_flickr.de.gz", "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8"),
    ("test_2016_flickr.en.gz", "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9"),
)]
# CIFAR-10 python archive (md5 c58f30108f718f92721af3b95e74349a, as torchvision pins it).
DATASETS["cifar10"] = [DatasetFile("cifar10/cifar-10-python.tar.gz", "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz", "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce")]

# WikiText-2 raw valid/test (byte-identical to wikitext-2-raw-v1.zip members), from the commit wikitext2/SOURCE.md names.
DATASETS["wikitext2"] = [DatasetFile(f"wikitext2/{f}", f"https://raw.githubusercontent.com/DRAGNLabs/LLMHumanModeling/67cb89ec83ca316877b9101d6b8b1227aa7cf8e4/data/{f}", h) for f, h in (("wiki.valid.raw", "4cd0f6876d07a413aa911261ff6d363c72d757d47f0fdd6015702014c89cb9c7"), ("wiki.test.raw", "173c87a53759e0201f33e0ccf978e510c2042d7f2cb78229d9a50d79b9e7dd08"))]
# GLUE SST-2 TSVs (train, dev, unlabeled test), from the commit sst2/SOURCE.md names.
DATASETS["sst2"] = [DatasetFile(f"sst2/{f}", f"https://raw.githubusercontent.com/tatsu-lab/mlm_inductive_bias/2d99e2477293036949ba356c88513729244dc1f9/finetuning/data/SST-2/{f}", h) for f, h in (("train.tsv", "48eac26399f8456935f81dd9e3a745c1430adb6c62e233ccfe22db4a0d15d1d1"), ("dev.tsv", "54a9c12c77e402fc14d6a66a506f24d999f596b0176eb777c972cccc2f9cc4b0"), ("test.tsv", "69a938605609b3e6663b4487918fe1565eb293734e6e520d0366d1d412fd2a13"))]


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
        raise ValueError(f"unknown dataset '{name}'; known: {', '.join(DATASETS)} (or point the data config at your own files)")
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
