"""Documents streamed from a corpus on disk, one at a time, so that nothing holds the whole corpus in memory.

Text files (.txt and anything not named below) give one document per file, per paragraph (blank-line separated)
or per line; JSON lines (.jsonl, .json) and Parquet (.parquet, through pyarrow) give one document per row, its
`text_field`. Documents are numbered in reading order across all files: that number decides a document's split
and is where an interrupted `zoo-prepare` resumes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

TEXT_UNITS = ("file", "paragraphs", "lines")


def _text_documents(path: Path, unit: str) -> Iterator[str]:
    if unit == "file":
        text = path.read_text(encoding="utf-8")
        if text.strip():
            yield text
        return
    with path.open(encoding="utf-8", newline="") as f:
        if unit == "lines":
            for line in f:
                if line.strip():
                    yield line
            return
        paragraph: list[str] = []
        for line in f:
            if line.strip():
                paragraph.append(line)
            elif paragraph:
                yield "".join(paragraph)
                paragraph = []
        if paragraph:
            yield "".join(paragraph)


def _jsonl_documents(path: Path, field: str) -> Iterator[str]:
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
            text = row.get(field) if isinstance(row, dict) else None
            if not isinstance(text, str):
                keys = ", ".join(row) if isinstance(row, dict) else "-"
                raise ValueError(
                    f"{path}, line {number}: no text field {field!r} (keys: {keys}); set prepare.text_field"
                )
            if text.strip():
                yield text


def _parquet_documents(path: Path, field: str) -> Iterator[str]:
    import pyarrow.parquet as pq  # imported only for Parquet inputs: it takes a while to load

    file = pq.ParquetFile(path)
    if field not in file.schema_arrow.names:
        raise ValueError(
            f"{path}: no column {field!r} (columns: {', '.join(file.schema_arrow.names)}); set prepare.text_field"
        )
    for batch in file.iter_batches(columns=[field], batch_size=1024):
        for text in batch.column(0).to_pylist():
            if text and text.strip():
                yield text


def read_documents(paths: list[Path], *, text_unit: str = "file", text_field: str = "text") -> Iterator[str]:
    """Every non-empty document of `paths`, in order (see the module docstring)."""
    if text_unit not in TEXT_UNITS:
        raise ValueError(f"prepare.documents must be one of {', '.join(TEXT_UNITS)}, got {text_unit!r}")
    for path in paths:
        if not path.is_file():
            raise FileNotFoundError(f"input file not found: {path.resolve()}; check data.text_files / data.val_files")
        suffix = path.suffix.lower()
        if suffix in (".jsonl", ".json"):
            yield from _jsonl_documents(path, text_field)
        elif suffix == ".parquet":
            yield from _parquet_documents(path, text_field)
        else:
            yield from _text_documents(path, text_unit)
