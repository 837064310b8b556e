"""Fetching one dataset file over HTTP(S): a progress bar, a sha256 check, and an atomic rename into place."""

from __future__ import annotations

import hashlib
import http.client
import sys
import urllib.error
import urllib.request
from pathlib import Path

from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

from .atomic import replacing

CHUNK = 1 << 16


class DownloadError(OSError):
    """The file could not be fetched (no network, unknown host, HTTP error, connection cut)."""


def _progress() -> Progress:
    # On stderr, so that a script's stdout (e.g. generated text) stays clean; rich draws nothing live off a terminal.
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        transient=True,
        disable=not sys.stderr.isatty(),
    )


def _received(url: str, timeout: float):
    """(Content-Length or None, chunk) for each chunk of the response. Every way the network can fail (no route,
    refused, unknown host, TLS, timeout, connection cut, an HTTP error status) becomes one DownloadError naming the
    URL."""
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
    """Download `url` to `target` and keep it only if its sha256 is `sha256`.

    The bytes go to a temporary file beside the target (same file system, so the final `os.replace` is atomic):
    a reader, or another DDP rank fetching the same file, never sees half a file, and a refused or interrupted
    download leaves nothing behind. Raises DownloadError when the server cannot be reached or answers with an
    error, ValueError when the checksum differs.
    """
    with replacing(target) as tmp:
        digest = hashlib.sha256()
        with open(tmp, "wb") as out, _progress() as bar:
            task = None
            # Only the network side is a DownloadError: a failed write (disk full) stays the OSError it is.
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
