"""Reading a user's text file: UTF-8, not empty, and an error that names the file when it is neither."""

from __future__ import annotations

from pathlib import Path


def read_text_file(path: Path, key: str) -> str:
    """The text of `path`, which the config option `key` (e.g. data.text_files) names.

    Python's own errors name neither the file nor the option ("cannot mmap an empty file" later, or "'utf-8' codec
    can't decode byte 0xd0 in position 24"), so an empty or binary file is refused here, by name."""
    data = path.read_bytes()
    if not data.strip():
        raise ValueError(f"{path} is empty; {key} needs files with text in them")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise ValueError(
            f"{path} is not UTF-8 text (byte offset {error.start}, line {line}: {error.reason}); {key} takes "
            "plain-text files: convert it to UTF-8 (e.g. iconv -f latin1 -t utf-8) or leave out binary files"
        ) from None
