"""Reading a user's text file: UTF-8, not empty, and an error that names the file and option when it is neither."""

from __future__ import annotations

from pathlib import Path


def utf8_error(path: Path, key: str, offset: int, line: int, reason: str) -> ValueError:
    return ValueError(
        f"{path} is not UTF-8 text (byte offset {offset}, line {line}: {reason}); {key} takes plain-text files: "
        "convert it to UTF-8 (e.g. iconv -f latin1 -t utf-8) or leave out binary files"
    )


def decode_utf8(data: bytes, path: Path, key: str) -> str:
    """`data` (the bytes of `path`, which the config option `key` names) as text."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise utf8_error(path, key, error.start, data.count(b"\n", 0, error.start) + 1, error.reason) from None


def read_text_file(path: Path, key: str) -> str:
    """The text of `path`; an empty file is refused by name too."""
    data = path.read_bytes()
    if not data.strip():
        raise ValueError(f"{path} is empty; {key} needs files with text in them")
    return decode_utf8(data, path, key)
