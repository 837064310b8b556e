"""Datasets shipped inside the package, so the main command trains on a fresh machine with no data and no network:
tiny shakespeare, gzipped, decompressed on first use into the cache folder after its sha256 is checked against the
one in `zoo/data/sources.py` (a damaged install is refused, never trained on).
"""

from __future__ import annotations

import gzip
import hashlib
from importlib import resources
from pathlib import Path

from ..atomic import atomic_write

# Path below the data directory (the layout docs/data.md describes) -> file in this package.
BUILTIN_FILES = {"tinyshakespeare/input.txt": "tinyshakespeare.txt.gz"}


def read_builtin(relpath: str, sha256: str) -> bytes:
    """The decompressed bytes of a shipped file, refused unless their sha256 is `sha256`."""
    name = BUILTIN_FILES[relpath]
    packed = resources.files(__package__).joinpath(name)
    try:
        data = gzip.decompress(packed.read_bytes())
    except (OSError, EOFError) as error:
        raise ValueError(
            f"the copy of {relpath} shipped in the package ({packed}) is unreadable ({error}); "
            "reinstall transformer-zoo or set ZOO_DATA_DIR to a folder holding it"
        ) from error
    got = hashlib.sha256(data).hexdigest()
    if got != sha256:
        raise ValueError(
            f"the copy of {relpath} shipped in the package ({packed}) has sha256 {got}, expected "
            f"{sha256}; reinstall transformer-zoo or set ZOO_DATA_DIR to a folder holding it"
        )
    return data


def materialize_builtin(relpath: str, sha256: str, cache_dir: Path) -> Path:
    """A plain file with the shipped dataset's bytes under `cache_dir/builtin/`, written once and checked by sha256
    whenever it is looked up."""
    target = cache_dir / "builtin" / relpath
    if target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == sha256:
        return target
    atomic_write(target, read_builtin(relpath, sha256))
    return target
