"""Documents streamed from a corpus on disk in pieces of bounded size, so that nothing holds the whole corpus, nor
a whole long document, in memory.

Text files give one document per file, per paragraph (blank-line separated) or per line; JSON lines (.jsonl, .json)
and Parquet give one document per row, its `text_field`. A document longer than `piece_chars` characters comes in
pieces, each cut where encoding the pieces one by one gives the tokens of encoding the document whole
(`cut_position`); a text file is read `piece_chars` characters at a time, a JSON line or Parquet value whole.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from pathlib import Path

from .text import utf8_error

TEXT_UNITS = ("file", "paragraphs", "lines")
PIECE_CHARS = 1_000_000  # the longest text a document's piece has (prepare.piece_chars)
INPUT_KEYS = "data.text_files / data.val_files"  # what names the input files in the messages

# Where a text may be cut without changing its tokens: before a single newline (preferred) or a single space between
# two characters that are not whitespace. For a byte-level BPE (GPT-2's pre-tokenizer), a WordPiece and a character
# vocabulary no token spans such a place, and Python's \S is narrower than any of theirs.
_NEWLINE_CUT = re.compile(r"(?<=\S)\n(?=\S)")
_SPACE_CUT = re.compile(r"(?<=\S) (?=\S)")
_NEAR = 65_536  # how far back from a piece's end a cut is first looked for


def _last_match(pattern: re.Pattern, text: str, lo: int, hi: int) -> int | None:
    """The start of the last match of `pattern` in text[lo:hi + 1], its lookarounds reading past both ends."""
    last = None
    for match in pattern.finditer(text, lo, min(hi + 2, len(text))):
        if match.start() <= hi:
            last = match.start()
    return last


def cut_position(text: str, start: int, limit: int) -> int:
    """Where the piece of `text` that begins at `start` ends: a safe place (see above) at most `limit` characters on,
    as late as possible, preferring a newline in the piece's second half. A text without one (a script written
    without spaces) is cut at `limit` characters, where its tokens may differ slightly from encoding it whole."""
    end = start + limit
    half = start + limit // 2
    for pattern, lo in ((_NEWLINE_CUT, half), (_SPACE_CUT, half), (_NEWLINE_CUT, start + 1), (_SPACE_CUT, start + 1)):
        near = _last_match(pattern, text, max(lo, end - _NEAR), end)  # the last few lines: the usual case, fast
        found = near if near is not None else _last_match(pattern, text, lo, end)
        if found is not None:
            return found
    return end


class Pieces:
    """Text added a part at a time, given back in pieces of at most `limit` characters cut at safe places; the
    parts held are joined only when they pass the limit."""

    def __init__(self, limit: int) -> None:
        self.limit, self.parts, self.size = limit, [], 0

    def add(self, text: str) -> Iterator[str]:
        """The pieces that `text` completes (none while less than `limit` characters are held)."""
        self.parts.append(text)
        self.size += len(text)
        if self.size <= self.limit:
            return
        held, start = "".join(self.parts), 0
        while len(held) - start > self.limit:
            cut = cut_position(held, start, self.limit)
            yield held[start:cut]
            start = cut
        self.parts, self.size = [held[start:]], len(held) - start

    def end(self) -> str:
        """What is left: the last piece (may be empty)."""
        text = "".join(self.parts)
        self.parts, self.size = [], 0
        return text


def split_text(text: str, limit: int) -> Iterator[tuple[str, bool]]:
    """(piece, last) of a text held in memory, cut as `Pieces` cuts it."""
    pieces = Pieces(limit)
    yield from ((piece, False) for piece in pieces.add(text))
    yield pieces.end(), True


def not_utf8(path: Path, key: str) -> ValueError:
    """The error for a file that is not UTF-8, naming its first bad byte, found by reading it again in blocks."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = lines = 0  # bytes and newlines of the blocks before this one
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            pending = len(decoder.getstate()[0])  # the bytes of a character begun in the block before
            try:
                decoder.decode(block)
            except UnicodeDecodeError as error:
                bad = offset - pending + error.start
                line = lines + block.count(b"\n", 0, max(bad - offset, 0)) + 1
                return utf8_error(path, key, bad, line, error.reason)
            lines += block.count(b"\n")
            offset += len(block)
    return utf8_error(path, key, offset - len(decoder.getstate()[0]), lines + 1, "unexpected end of data")


def _text_pieces(path: Path, unit: str, limit: int) -> Iterator[tuple[str, bool]]:
    """(piece, last) of the documents of a text file (`last`: the piece ends its document)."""
    with path.open(encoding="utf-8", newline="") as f:
        if unit == "file":
            yield from _file_pieces(f, limit)
            return
        pieces, inside = Pieces(limit), False  # inside: a document (line, paragraph) has begun
        for part, blank, ends_line in _line_parts(f, limit):
            if blank:  # a whole blank line: it ends a paragraph; in lines mode it is skipped
                if unit == "paragraphs" and inside:
                    yield pieces.end(), True
                    inside = False
                continue
            inside = True
            yield from ((piece, False) for piece in pieces.add(part))
            if unit == "lines" and ends_line:
                yield pieces.end(), True
                inside = False
        if inside:
            yield pieces.end(), True


def _file_pieces(f, limit: int) -> Iterator[tuple[str, bool]]:
    """The whole file as one document, in pieces; nothing for a file of whitespace only."""
    pieces, held, text_seen = Pieces(limit), [], False
    while chunk := f.read(limit):
        if not text_seen:
            held.append(chunk)
            if not chunk.strip():
                continue  # whitespace so far: the file may be blank, which is no document
            text_seen, chunk = True, "".join(held)
        yield from ((piece, False) for piece in pieces.add(chunk))
    if text_seen:
        yield pieces.end(), True


_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)")  # a line as a file opened with newline="" gives it


def _raw_line_parts(f, limit: int) -> Iterator[tuple[str, bool]]:
    """(part, ends_line) of the lines of `f`, read `limit` characters at a time: a longer line comes in parts."""
    carry = ""
    while True:
        chunk = f.read(limit)
        text = carry + chunk
        carry = ""
        if chunk and text.endswith("\r"):  # the \n of a CRLF may be in the next read
            text, carry = text[:-1], "\r"
        start = 0
        for line in _LINE.finditer(text):
            yield line.group(), True
            start = line.end()
        if start < len(text):
            yield text[start:], not chunk  # a line's beginning; at the end of the file, all of its last line
        if not chunk:
            return


def _line_parts(f, limit: int) -> Iterator[tuple[str, bool, bool]]:
    """(part, blank, ends_line) of the lines of `f`; a line's parts are held until it shows text or ends."""
    held: list[str] = []
    text_seen = False
    for part, ends in _raw_line_parts(f, limit):
        if text_seen:
            yield part, False, ends
        elif part.strip():
            text_seen = True
            yield "".join(held) + part, False, ends
            held = []
        else:
            held.append(part)
            if ends:
                yield "".join(held), True, True
                held = []
        if ends:
            text_seen = False
    if held:
        yield "".join(held), True, True


def _json_type(value) -> str:
    names = {bool: "a boolean", int: "a number", float: "a number", list: "an array", dict: "an object"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _jsonl_texts(path: Path, field: str) -> Iterator[str]:
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(
                    f"{path}, line {number}: not JSON ({e.msg}); each line must be one JSON object"
                ) from None
            if not isinstance(row, dict):
                raise ValueError(
                    f"{path}, line {number}: {_json_type(row)}, not a JSON object; each line must be one object "
                    f"with the text in its field {field!r} (prepare.text_field)"
                )
            if field not in row:
                raise ValueError(
                    f"{path}, line {number}: no text field {field!r} (keys: {', '.join(row) or '-'}); set "
                    "prepare.text_field"
                )
            text = row[field]
            if not isinstance(text, str):
                raise ValueError(
                    f"{path}, line {number}: the field {field!r} is {_json_type(text)} ({json.dumps(text)[:40]}), "
                    "not a string; set prepare.text_field to the field that holds the text"
                )
            if text.strip():
                yield text


def _parquet_texts(path: Path, field: str) -> Iterator[str]:
    import pyarrow as pa  # imported only for Parquet inputs: it takes a while to load
    import pyarrow.parquet as pq

    file = pq.ParquetFile(path)
    schema = file.schema_arrow
    if field not in schema.names:
        raise ValueError(f"{path}: no column {field!r} (columns: {', '.join(schema.names)}); set prepare.text_field")
    kind = schema.field(field).type
    is_text = [pa.types.is_string, pa.types.is_large_string, getattr(pa.types, "is_string_view", lambda _: False)]
    if not any(check(kind) for check in is_text):
        texts = [name for name in schema.names if any(check(schema.field(name).type) for check in is_text)]
        raise ValueError(
            f"{path}: the column {field!r} holds {kind} values, not text; set prepare.text_field to a column of "
            f"strings (here: {', '.join(texts) or 'none'})"
        )
    for batch in file.iter_batches(columns=[field], batch_size=1024):
        for text in batch.column(0).to_pylist():
            if text and text.strip():
                yield text


def read_document_pieces(
    paths: list[Path],
    *,
    text_unit: str = "file",
    text_field: str = "text",
    piece_chars: int = PIECE_CHARS,
    key: str = INPUT_KEYS,
) -> Iterator[tuple[str, bool]]:
    """(piece, last) of every non-empty document of `paths`, in order, `last` true on a document's final piece.
    `key`: the option that names the files, for the errors."""
    if text_unit not in TEXT_UNITS:
        raise ValueError(f"prepare.documents must be one of {', '.join(TEXT_UNITS)}, got {text_unit!r}")
    for path in paths:  # found: checked by zoo-prepare first
        suffix = path.suffix.lower()
        try:
            if suffix in (".jsonl", ".json"):
                for text in _jsonl_texts(path, text_field):
                    yield from split_text(text, piece_chars)
            elif suffix == ".parquet":
                for text in _parquet_texts(path, text_field):
                    yield from split_text(text, piece_chars)
            else:
                yield from _text_pieces(path, text_unit, piece_chars)
        except UnicodeDecodeError:
            raise not_utf8(path, key) from None


def read_documents(
    paths: list[Path], *, text_unit: str = "file", text_field: str = "text", key: str = INPUT_KEYS
) -> Iterator[str]:
    """Every non-empty document of `paths`, in order, each whole."""
    parts: list[str] = []
    for piece, last in read_document_pieces(paths, text_unit=text_unit, text_field=text_field, key=key):
        parts.append(piece)
        if last:
            yield "".join(parts)
            parts = []


def read_text_pieces(path: Path, key: str, limit: int) -> Iterator[str]:
    """A file read as plain text (split="position"), `limit` characters at a time, a CRLF kept."""
    text_seen = False
    try:
        with path.open(encoding="utf-8", newline="") as f:
            while chunk := f.read(limit):
                text_seen = text_seen or bool(chunk.strip(" \t\n\r\x0b\x0c"))  # what bytes.strip() strips
                yield chunk
    except UnicodeDecodeError:
        raise not_utf8(path, key) from None
    if not text_seen:
        raise ValueError(f"{path} is empty; {key} needs files with text in them")
