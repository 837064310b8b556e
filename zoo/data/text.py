"""Reading a user's text file: UTF-8, not empty, and an error that names the file when it is neither."""

from __future__ import annotations

from pathlib import Path


def decode_utf8(data: bytes, path: Path, key: str) -> str:
    """`data` (the bytes of `path`, which the config option `key` names) as text. Python's own error names
    neither the file nor the option ("'utf-8' codec can't decode byte 0xd0 in position 24"); this one names both,
    with the byte offset and line, so a binary file given by mistake is found at once."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise ValueError(
            f"{path} is not UTF-8 text (byte offset {error.start}, line {line}: {error.reason}); {key} takes "
            "plain-text files: convert it to UTF-8 (e.g. iconv -f latin1 -t utf-8) or leave out binary files"
        ) from None


def read_text_file(path: Path, key: str) -> str:
    """The text of `path`; an empty file is refused by name too (later it would be "cannot mmap an empty file")."""
    data = path.read_bytes()
    if not data.strip():
        raise ValueError(f"{path} is empty; {key} needs files with text in them")
    return decode_utf8(data, path, key)
