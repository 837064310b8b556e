"""Token shards made once, outside training (`zoo-prepare`, zoo/entry/prepare.py): documents streamed from disk,
encoded in parallel batches, written as flat token files plus a manifest.

Memory stays bounded whatever the corpus: documents are read a piece of at most `piece_chars` characters at a time
(cut where the tokens do not change: zoo/data/documents.py), encoded `batch_bytes` of text at a time, and tokens are
held until a shard of `shard_tokens` is written. split="documents": each document is followed by the end-of-text
token (a newline for character vocabularies) and goes to validation by a draw keyed on (seed, its number) alone, or
the `val_files` are validation. split="position" (what LanguageModelDataModule trains on): the files read as plain
text, joined by a newline, the last `val_fraction` of the characters is validation, nothing is added.
split="auto": "position" for plain text files read whole, else "documents".

Train and val shards are written together and `progress.json` (replaced atomically after each pair) names the piece
count an interrupted run resumes from, making the bytes an uninterrupted run makes. It records every input's size
and modification time: a resume over changed input is refused. `manifest.json`, written last, marks the output
complete. A split that would be empty is refused before anything is trained or encoded, an input error leaves
nothing that would stop the corrected run, and a second process writing into the same folder is refused (a lock
on `.prepare.lock`).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from .atomic import atomic_write
from .documents import PIECE_CHARS, Pieces, read_document_pieces, read_text_pieces
from .prepare_lock import refuse_if_locked
from .tokenizer import EOS, BPETokenizer, CharTokenizer, load_tokenizer, tokenizer_from_json

FORMAT = "zoo-token-shards/1"
SPLITS = ("train", "val")
SPLIT_MODES = ("documents", "position")
STRUCTURED = (".jsonl", ".json", ".parquet")  # inputs of documents by row, never read as plain text by "auto"
LOCK = ".prepare.lock"
SHARD_NAME = re.compile(r"(train|val)_\d{5}\.bin")


@dataclass(frozen=True)
class PrepareOptions:
    """Everything that decides the shards' bytes (recorded in the manifest; a resume must match them)."""

    tokenizer: str = "bpe"  # "char", "bpe" (trained here), or a path to a published tokenizer or a zoo .ckpt
    bpe_vocab_size: int = 4096
    val_fraction: float = 0.1  # of documents (split="documents") or of the text (split="position"), without val_files
    split: str = "documents"  # or "position", or "auto" (decided by resolve_split before anything is recorded)
    seed: int = 0
    documents: str = "file"  # text files: one document per file | paragraphs | lines
    text_field: str = "text"  # JSON lines / Parquet
    shard_tokens: int = 100_000_000
    tokenizer_sample_bytes: int = 200_000_000  # text a BPE is trained on, from the start of the training split
    inputs: dict = field(default_factory=dict)  # {"train": [paths], "val": [paths] or None}


def resolve_split(options: PrepareOptions) -> PrepareOptions:
    """`options` with split="auto" decided: "position" where every input is a plain text file read whole, as
    `train.py data=text_files` splits them, else "documents"."""
    if options.split != "auto":
        return options
    plain = all(Path(p).suffix.lower() not in STRUCTURED for p in _all_inputs(options))
    return replace(options, split="position" if plain and options.documents == "file" else "documents")


def _is_val(seed: int, number: int, fraction: float) -> bool:
    """A counter-based draw: uniform in [0, 1) from (seed, document number) alone."""
    digest = hashlib.blake2b(f"{seed}:{number}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2**64 < fraction


# A unit of the input: (split, text, ends a document), numbered in order; a resumed run skips those written.
Unit = tuple[str, str, bool]


def _document_units(options: PrepareOptions, piece_chars: int, keys: tuple[str, str]) -> Iterator[Unit]:
    """The pieces of every document (split="documents"), in order, each with its document's split."""
    train = [Path(p) for p in options.inputs["train"]]
    val = options.inputs.get("val")
    read = dict(text_unit=options.documents, text_field=options.text_field, piece_chars=piece_chars)
    number, starts = 0, True  # the document's number; whether the next piece begins it
    split = "train"
    for piece, last in read_document_pieces(train, key=keys[0], **read):
        if starts:
            split = "val" if val is None and _is_val(options.seed, number, options.val_fraction) else "train"
        yield split, piece, last
        number, starts = number + last, last
    for piece, last in read_document_pieces([Path(p) for p in val or []], key=keys[1], **read):
        yield "val", piece, last


def _joined(paths: list[str], key: str, piece_chars: int) -> Iterator[tuple[str, bool]]:
    """(chunk, ends_file) of the text of `paths` read as plain text and joined by a newline, as
    LanguageModelDataModule joined them, in chunks of at most `piece_chars` characters."""
    for index, path in enumerate(paths):
        if index:
            yield "\n", False
        chunks = read_text_pieces(Path(path), key, piece_chars)
        chunk = next(chunks)  # a file has text (read_text_pieces refuses an empty one)
        for after in chunks:
            yield chunk, False
            chunk = after
        yield chunk, True


def _position_cut(options: PrepareOptions, keys: tuple[str, str], piece_chars: int) -> int | None:
    """Where validation begins in the joined training text (None with val files), found by reading every file once
    to count its characters; this also checks every file (found, not empty, UTF-8) and that no split is empty."""
    total = sum(len(chunk) for chunk, _ in _joined(options.inputs["train"], keys[0], piece_chars))
    if options.inputs.get("val") is not None:
        for _ in _joined(options.inputs["val"], keys[1], piece_chars):
            pass
        return None
    cut = int(total * (1 - options.val_fraction))  # LanguageModelDataModule's expression: the same position
    if cut == 0 or cut == total:
        raise ValueError(
            f"the {'train' if cut == 0 else 'val'} split of {', '.join(options.inputs['train'])} has no tokens; give "
            f"more text (or a larger data.val_fraction, or data.val_files): of its {total:,} character"
            f"{'s' * (total != 1)}, the last data.val_fraction={options.val_fraction} are validation"
        )
    return cut


def _position_units(
    options: PrepareOptions, keys: tuple[str, str], piece_chars: int, cut: int | None, file_edges: bool
) -> Iterator[Unit]:
    """The pieces of the joined text (split="position"), cut where the tokens do not change, so that encoding them
    one by one gives the ids of encoding each split whole. `file_edges` (a character vocabulary, whose text may be
    cut anywhere): a piece also ends where a file does, so that shards can end between files. Each split's text
    ends one "document", with no separator after it."""
    pieces = Pieces(piece_chars)

    def chunks(split: str, chunk: str, ends_file: bool) -> Iterator[Unit]:
        yield from ((split, piece, False) for piece in pieces.add(chunk))
        if ends_file and file_edges and pieces.size:
            yield split, pieces.end(), False

    if cut is None:  # val files: each split is its own files
        for split, paths, key in (("train", options.inputs["train"], keys[0]), ("val", options.inputs["val"], keys[1])):
            for chunk, ends_file in _joined(paths, key, piece_chars):
                yield from chunks(split, chunk, ends_file)
            yield split, pieces.end(), True
        return
    split, position = "train", 0  # position: where the chunk begins in the joined training text
    for chunk, ends_file in _joined(options.inputs["train"], keys[0], piece_chars):
        if split == "train" and position + len(chunk) > cut:  # the training text ends in this chunk
            inside = cut - position
            yield from (("train", piece, False) for piece in pieces.add(chunk[:inside]))
            yield "train", pieces.end(), True
            split, chunk = "val", chunk[inside:]
        position += len(chunk)
        yield from chunks(split, chunk, ends_file)
    yield "val", pieces.end(), True


def _units(
    options: PrepareOptions, keys: tuple[str, str], piece_chars: int, cut: int | None, tokenizer=None
) -> Iterator[Unit]:
    """Every unit of the input, in order (`tokenizer`: None while it is being trained)."""
    if options.split == "position":
        return _position_units(options, keys, piece_chars, cut, file_edges=isinstance(tokenizer, CharTokenizer))
    return _document_units(options, piece_chars, keys)


def _check_documents_split(options: PrepareOptions, keys: tuple[str, str], piece_chars: int) -> None:
    """Refuse inputs that leave a split of documents empty; reading stops once both splits have a document."""
    read = dict(text_unit=options.documents, text_field=options.text_field, piece_chars=piece_chars)
    val = options.inputs.get("val")
    if val is not None:
        for split, paths, key in (("train", options.inputs["train"], keys[0]), ("val", val, keys[1])):
            if next(read_document_pieces([Path(p) for p in paths], key=key, **read), None) is None:
                raise ValueError(
                    f"the {split} split has no documents: {', '.join(paths)} hold only empty text; give files with "
                    "text in them"
                )
        return
    seen, count = set(), 0
    for _, last in read_document_pieces([Path(p) for p in options.inputs["train"]], key=keys[0], **read):
        if last:
            seen.add("val" if _is_val(options.seed, count, options.val_fraction) else "train")
            count += 1
            if len(seen) == 2:
                return
    empty = "train" if "val" in seen else "val"
    unit = {"file": "text file", "paragraphs": "paragraph of a text file", "lines": "line of a text file"}
    raise ValueError(
        f"the {empty} split has no documents ({count:,} in all, each {unit[options.documents]} or row of JSON "
        f"lines or Parquet drawn whole to one split with data.val_fraction={options.val_fraction}); give more "
        "documents, a larger data.val_fraction, or data.val_files (prepare.split=position cuts text files by "
        "position, as train.py does; prepare.documents=paragraphs or lines splits them into more documents)"
    )


def _check_splits(options: PrepareOptions, keys: tuple[str, str], piece_chars: int) -> int | None:
    """Check that both splits will have text; the position split's cut, or None."""
    if options.split == "position":
        return _position_cut(options, keys, piece_chars)
    _check_documents_split(options, keys, piece_chars)
    return None


def build_tokenizer(
    options: PrepareOptions,
    *,
    keys: tuple[str, str] = ("data.text_files", "data.val_files"),
    piece_chars: int = PIECE_CHARS,
    cut: int | None = None,
):
    """The tokenizer the shards are encoded with: loaded, or trained on a streamed pass over the input."""
    if options.tokenizer not in ("char", "bpe"):
        return load_tokenizer(options.tokenizer)  # a published tokenizer, or the one a zoo checkpoint stores
    position = options.split == "position"
    if position and cut is None and options.inputs.get("val") is None:
        cut = _position_cut(options, keys, piece_chars)
    units = _units(options, keys, piece_chars, cut)
    if options.tokenizer == "char":
        # Every character of every split has an id; documents also need a newline, their separator.
        chars: set[str] = set()
        for _, text, _ in units:
            chars.update(text)
        return CharTokenizer("".join(sorted(chars if position else chars | {"\n"})))
    if position:
        # As BPETokenizer.train: on the lines of the whole training text (no tokenizer_sample_bytes); no pre-token
        # spans a cut between pieces, so the merges are the same.
        def lines() -> Iterator[str]:
            for split, text, _ in units:
                if split != "train":
                    return  # the training text comes first
                yield from text.splitlines(keepends=True)

        return BPETokenizer.train_from_documents(lines(), options.bpe_vocab_size)

    def sample() -> Iterator[str]:
        seen = 0
        for split, text, _ in units:
            if split != "train":
                continue
            yield text
            seen += len(text)
            if seen >= options.tokenizer_sample_bytes:
                return

    return BPETokenizer.train_from_documents(sample(), options.bpe_vocab_size)


def separator_id(tokenizer) -> int:
    if getattr(tokenizer, "eos_id", None) is not None:
        return tokenizer.eos_id
    if isinstance(tokenizer, CharTokenizer) and "\n" in tokenizer.index:
        return tokenizer.index["\n"]
    raise ValueError(f"the tokenizer has no end-of-text token ({EOS}) to put between documents; add one to it")


def encode_batch(tokenizer, texts: list[str]) -> list[np.ndarray]:
    """Token ids of each text, as encoding it alone gives."""
    if isinstance(tokenizer, CharTokenizer):
        # Code points looked up in the sorted vocabulary, with no Python loop over characters.
        vocab = np.frombuffer(tokenizer.chars.encode("utf-32-le"), dtype=np.uint32)
        order = np.argsort(vocab)
        out = []
        for text in texts:
            points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
            where = np.searchsorted(vocab[order], points).clip(max=len(vocab) - 1)
            if not np.array_equal(vocab[order][where], points):
                tokenizer.encode(text)  # raises, naming the characters outside the vocabulary
            out.append(order[where].astype(np.int64))
        return out
    if isinstance(tokenizer, BPETokenizer):
        return [np.asarray(e.ids, dtype=np.int64) for e in tokenizer.tokenizer.encode_batch_fast(texts)]
    return [np.asarray(tokenizer.encode(text), dtype=np.int64) for text in texts]


class _ShardSet:
    """The shards of one output directory, with the progress record an interrupted run resumes from."""

    def __init__(self, directory: Path, dtype: np.dtype, progress: dict) -> None:
        self.directory, self.dtype, self.progress = directory, dtype, progress
        self.buffers: dict[str, list[np.ndarray]] = {s: [] for s in SPLITS}
        self.counts = dict.fromkeys(SPLITS, 0)

    def add(self, split: str, ids: np.ndarray) -> None:
        self.buffers[split].append(ids.astype(self.dtype))  # held in the shard's own width until written
        self.counts[split] += len(ids)

    def flush(self, pieces_done: int) -> None:
        """Write the buffered tokens of each split as its next shard, then record the progress."""
        for split in SPLITS:
            if not self.counts[split]:
                continue
            shards = self.progress["shards"][split]
            name = f"{split}_{len(shards):05d}.bin"
            data = np.concatenate(self.buffers[split]).tobytes()
            atomic_write(self.directory / name, data)
            shards.append({"file": name, "tokens": self.counts[split], "sha256": hashlib.sha256(data).hexdigest()})
            self.buffers[split], self.counts[split] = [], 0
        self.progress["pieces_done"] = pieces_done
        self.progress["documents_done"] = sum(self.progress["documents"].values())
        atomic_write(self.directory / "progress.json", json.dumps(self.progress, indent=1))


def prepare_shards(
    options: PrepareOptions,
    output_dir: Path,
    *,
    batch_bytes: int = 8_000_000,
    piece_chars: int = PIECE_CHARS,
    log=print,
    tokenizer=None,
    input_keys: tuple[str, str] = ("data.text_files", "data.val_files"),
) -> dict:
    """Make (or finish, or find made) the shards of `options` in `output_dir`; returns the manifest. `tokenizer`: the
    one `options.tokenizer` names, already loaded; `input_keys`: what the inputs are called in the errors."""
    check_options(options)
    options = resolve_split(options)
    output_dir.mkdir(parents=True, exist_ok=True)

    def refusal(holder: str) -> str:
        return (
            f"{output_dir.resolve()} is being written by another zoo-prepare ({holder} holds {LOCK} there); wait "
            "for it to finish, or give this one another prepare.output_dir"
        )

    with refuse_if_locked(output_dir / LOCK, refusal):
        return _prepare_locked(options, output_dir, batch_bytes, piece_chars, log, tokenizer, input_keys)


def _prepare_locked(options, output_dir: Path, batch_bytes, piece_chars, log, tokenizer, input_keys) -> dict:
    recorded = asdict(options)
    manifest_path, progress_path = output_dir / "manifest.json", output_dir / "progress.json"
    for path in (manifest_path, progress_path):
        if path.is_file() and recorded_options(path) != recorded:
            raise ValueError(
                f"{output_dir} holds shards made with other options (see {path.name}); choose another "
                "prepare.output_dir, or remove that folder to make them again"
            )
    if manifest_path.is_file():
        log(f"already prepared: {manifest_path}")
        return json.loads(manifest_path.read_text())
    started = time.perf_counter()
    inputs = _input_stats(options, input_keys)
    progress = json.loads(progress_path.read_text()) if progress_path.is_file() else None
    if progress is not None and "pieces_done" not in progress:
        log(f"{progress_path} was left by an earlier zoo-prepare that did not record its inputs: starting again")
        _remove_partial(output_dir)
        progress = None
    if progress is not None:
        _check_unchanged(progress["inputs"], inputs, output_dir)
        piece_chars = progress["piece_chars"]  # the pieces are counted as they were cut: the same size
    cut = _check_splits(options, input_keys, piece_chars)  # before a tokenizer is trained or a token encoded
    if progress is not None:
        tokenizer = tokenizer_from_json(progress["tokenizer"])
        log(f"resuming after document {progress['documents_done']:,} ({progress_path})")
    else:
        if tokenizer is None:
            tokenizer = build_tokenizer(options, keys=input_keys, piece_chars=piece_chars, cut=cut)
        progress = {
            "options": recorded,
            "tokenizer": tokenizer.to_json(),
            "inputs": inputs,
            "piece_chars": piece_chars,
            "pieces_done": 0,
            "documents_done": 0,
            "documents": dict.fromkeys(SPLITS, 0),
            "shards": {s: [] for s in SPLITS},
        }
    try:
        manifest = _encode(options, output_dir, progress, tokenizer, cut, batch_bytes, input_keys)
        manifest["seconds"] = round(time.perf_counter() - started, 3)
    except ValueError:
        # Bad input found while encoding: the corrected input changes, so nothing written could be resumed.
        _remove_partial(output_dir)
        raise
    atomic_write(manifest_path, json.dumps(manifest, indent=1))  # last: marks the output complete
    progress_path.unlink(missing_ok=True)
    position = options.split == "position"
    total = sum(manifest["documents"].values())
    files = len(_all_inputs(options))
    source = f" of {files:,} file{'s' * (files != 1)} split by position" if position else f" from {total:,} documents"
    log(
        f"prepared {manifest['tokens']['train']:,} train / {manifest['tokens']['val']:,} val tokens{source} in "
        f"{manifest['seconds']:.1f} s: {manifest_path}"
    )
    return manifest


def _encode(options, output_dir: Path, progress: dict, tokenizer, cut, batch_bytes: int, keys) -> dict:
    """Encode the units not written yet into shards; the manifest of the whole (not yet written)."""
    dtype = np.dtype(np.uint16 if tokenizer.vocab_size <= 2**16 else np.uint32)
    position = options.split == "position"
    separator = np.zeros(0, dtype=np.int64) if position else np.asarray([separator_id(tokenizer)], dtype=np.int64)
    shards = _ShardSet(output_dir, dtype, progress)
    done = progress["pieces_done"]
    batch: list[tuple[int, str, str, bool]] = []

    def encode_pending() -> None:
        nonlocal batch
        for (number, split, _, last), ids in zip(batch, encode_batch(tokenizer, [text for _, _, text, _ in batch])):
            shards.add(split, ids)
            if last:
                shards.add(split, separator)
                progress["documents"][split] += 1
            if shards.counts["train"] >= options.shard_tokens:
                shards.flush(number + 1)
        batch = []

    pending_bytes = 0
    number = -1
    for number, (split, text, last) in enumerate(_units(options, keys, progress["piece_chars"], cut, tokenizer)):
        if number < done:
            continue  # made before the interruption
        batch.append((number, split, text, last))
        pending_bytes += len(text)
        if pending_bytes >= batch_bytes:
            encode_pending()
            pending_bytes = 0
    encode_pending()
    shards.flush(number + 1)
    manifest = {
        "format": FORMAT,
        "dtype": dtype.name,
        "separator_id": int(separator[0]) if len(separator) else None,
        **progress,
        "tokens": {s: sum(x["tokens"] for x in progress["shards"][s]) for s in SPLITS},
    }
    del manifest["documents_done"], manifest["pieces_done"]
    return manifest


def _input_stats(options: PrepareOptions, keys: tuple[str, str]) -> list[dict]:
    """Every input's path, size and modification time, which a resumed run checks."""
    stats = []
    for split, key in zip(SPLITS, keys):
        for path in options.inputs.get(split) or []:
            path = Path(path)
            if not path.is_file():
                raise FileNotFoundError(f"input file not found: {path.resolve()}; check {key}")
            stat = path.stat()
            stats.append({"path": str(path.resolve()), "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns})
    return stats


def _check_unchanged(recorded: list[dict], now: list[dict], output_dir: Path) -> None:
    for before, after in zip(recorded, now):
        if before != after:
            raise ValueError(
                f"{after['path']} changed since the interrupted prepare in {output_dir} began (its size or "
                "modification time is not the one progress.json records), so its shards would mix two versions: "
                f"delete {output_dir / 'progress.json'} (or the whole folder) to prepare again"
            )


def _remove_partial(output_dir: Path) -> None:
    """Delete the progress file, shards and temporary files of an unfinished output."""
    for path in output_dir.iterdir():
        if path.name == "progress.json" or SHARD_NAME.fullmatch(path.name) or path.name.endswith(".tmp"):
            path.unlink(missing_ok=True)


def check_options(options: PrepareOptions) -> None:
    if options.split not in (*SPLIT_MODES, "auto"):
        raise ValueError(f"prepare.split must be one of {', '.join(SPLIT_MODES)}, auto, got {options.split!r}")
    if options.split == "position" and options.documents != "file":
        raise ValueError(
            f"prepare.documents={options.documents} does not go with prepare.split=position, which reads every file "
            "whole, as plain text; leave prepare.documents=file"
        )


def recorded_options(path: Path) -> dict:
    """The options a manifest or progress file records (files made before `split` existed split by document)."""
    return {"split": "documents", **json.loads(path.read_text())["options"]}


def _all_inputs(options: PrepareOptions) -> list[str]:
    return [*options.inputs["train"], *(options.inputs.get("val") or [])]
