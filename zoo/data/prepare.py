"""Token shards made once, outside training: documents streamed from disk, encoded in parallel batches, written
as flat token files plus a manifest (`zoo-prepare`, zoo/entry/prepare.py).

Memory stays bounded whatever the corpus size: documents are read one at a time, encoded `batch_bytes` of text at
a time (`tokenizers` spreads a batch over every core), and tokens are held until a shard of `shard_tokens` is
written. Every document is followed by the tokenizer's end-of-text token (character vocabularies have none: a
newline, as the corpus reader joined files before). A document goes to the validation split by a draw keyed on
(seed, its number) alone, so the split does not depend on batch sizes or on an interruption; with `val_files` the
validation split is those files instead.

Shards end on document boundaries, and the train and validation shards are written together, so the progress
file (`progress.json`, replaced atomically after each pair) names one document count from which an interrupted run
resumes and makes byte for byte the files an uninterrupted one makes. `manifest.json`, written last, marks the
output complete: token counts, sha256 of every shard, the tokenizer, the options and inputs that made them.

`split="position"` is the other way to split, the one the small named datasets have always trained on
(LanguageModelDataModule, nanoGPT's shakespeare_char): every input file read as plain text, the files joined by a
newline, and the last `val_fraction` of that text, counted in characters, is validation; no end-of-text token is
added anywhere. See `_position_pieces` for what it streams and what it cannot.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .atomic import atomic_write
from .documents import read_documents
from .text import read_text_file
from .tokenizer import EOS, BPETokenizer, CharTokenizer, load_tokenizer

FORMAT = "zoo-token-shards/1"
SPLITS = ("train", "val")
SPLIT_MODES = ("documents", "position")


@dataclass(frozen=True)
class PrepareOptions:
    """Everything that decides the shards' bytes (recorded in the manifest; a resume must match them)."""

    tokenizer: str = "bpe"  # "char", "bpe" (trained here), or a path to a published tokenizer or a zoo .ckpt
    bpe_vocab_size: int = 4096
    val_fraction: float = 0.1  # of documents (split="documents") or of the text (split="position"), without val_files
    # "documents": each document drawn to a split by (seed, its number), an end-of-text token after each;
    # "position": the files' text joined as LanguageModelDataModule always joined it, its last val_fraction is val.
    split: str = "documents"
    seed: int = 0
    documents: str = "file"  # text files: one document per file | paragraphs | lines
    text_field: str = "text"  # JSON lines / Parquet
    shard_tokens: int = 100_000_000
    tokenizer_sample_bytes: int = 200_000_000  # text a BPE is trained on, from the start of the training split
    inputs: dict = field(default_factory=dict)  # {"train": [paths], "val": [paths] or None}


def _is_val(seed: int, number: int, fraction: float) -> bool:
    """A counter-based draw: uniform in [0, 1) from (seed, document number) alone."""
    digest = hashlib.blake2b(f"{seed}:{number}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2**64 < fraction


def _numbered_documents(options: PrepareOptions) -> Iterator[tuple[int, str, str]]:
    """(number, split, text) of every document (split="documents"), in order."""
    train = [Path(p) for p in options.inputs["train"]]
    val = options.inputs.get("val")
    read = dict(text_unit=options.documents, text_field=options.text_field)
    number = 0
    for text in read_documents(train, **read):
        split = "val" if val is None and _is_val(options.seed, number, options.val_fraction) else "train"
        yield number, split, text
        number += 1
    for text in read_documents([Path(p) for p in val or []], **read):
        yield number, "val", text
        number += 1


def _text_files(options: PrepareOptions, keys: tuple[str, str]) -> Iterator[tuple[str, str]]:
    """(split, text) of every input file, read whole as plain text, in order: the files of each split joined by a
    newline (a newline begins every file but the first of its split), as LanguageModelDataModule joined them."""
    for split, key in zip(SPLITS, keys):
        for index, path in enumerate(options.inputs.get(split) or []):
            text = read_text_file(Path(path), key)
            yield split, text if index == 0 else "\n" + text


def _position_pieces(
    options: PrepareOptions, *, whole: bool, keys: tuple[str, str] = ("data.text_files", "data.val_files")
) -> Iterator[tuple[int, str, str]]:
    """(number, split, text) of the pieces of the joined text (split="position"), in order.

    Without val files the cut is at int(characters x (1 - val_fraction)) of the joined training text, so its total
    length must be known before the first piece: a first pass reads every file once to count its characters (one
    file in memory at a time). Then each file is one piece, or two where the cut falls inside it. That streaming
    holds for a character vocabulary only, whose ids of a text are the ids of its pieces put together; any other
    tokenizer (a BPE, a published one) may merge across a piece's edge, so with `whole` the pieces of a split are
    joined into one text and encoded at once, as LanguageModelDataModule encoded each split: the same ids, and the
    split's text in memory."""
    cut = None
    if options.inputs.get("val") is None:
        total = sum(len(text) for _, text in _text_files(options, keys))
        cut = int(total * (1 - options.val_fraction))  # LanguageModelDataModule's expression: the same position

    def pieces() -> Iterator[tuple[str, str]]:
        start = 0  # where the file begins in the joined training text
        for split, text in _text_files(options, keys):
            if cut is None:
                yield split, text
                continue
            inside = min(max(cut - start, 0), len(text))  # how much of this file lies before the cut
            start += len(text)
            if inside:
                yield "train", text[:inside]
            if inside < len(text):
                yield "val", text[inside:]

    if whole:
        texts: dict[str, list[str]] = {split: [] for split in SPLITS}
        for split, text in pieces():
            texts[split].append(text)
        numbered = [(split, "".join(texts[split])) for split in SPLITS]
    else:
        numbered = pieces()
    for number, (split, text) in enumerate(numbered):
        yield number, split, text


def build_tokenizer(options: PrepareOptions, *, keys: tuple[str, str] = ("data.text_files", "data.val_files")):
    """The tokenizer the shards are encoded with: loaded, or trained on a streamed pass over the input."""
    if options.tokenizer not in ("char", "bpe"):
        return load_tokenizer(options.tokenizer)  # a published tokenizer, or the one a zoo checkpoint stores
    position = options.split == "position"
    if options.tokenizer == "char":
        # Every character of every split must have an id. Position split: exactly the characters of the text, as
        # CharTokenizer.train(train_text + val_text) had them; documents: a newline too, their separator.
        if position:
            texts = (text for _, text in _text_files(options, keys))
        else:
            texts = (text for *_, text in _numbered_documents(options))
        chars: set[str] = set()
        for text in texts:
            chars.update(text)
        return CharTokenizer("".join(sorted(chars if position else chars | {"\n"})))
    if position:
        # As LanguageModelDataModule trained it: on the whole training text (no tokenizer_sample_bytes; the text is
        # held whole to be encoded anyway, see _position_pieces).
        train_text = next(text for *_, text in _position_pieces(options, whole=True, keys=keys))
        return BPETokenizer.train(train_text, options.bpe_vocab_size)

    def sample() -> Iterator[str]:
        seen = 0
        for _, split, text in _numbered_documents(options):
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
        # Code points looked up in the sorted vocabulary: no Python loop over characters.
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
        # encode_batch_fast: the same ids without the character offsets of every token, which shards do not keep.
        return [np.asarray(e.ids, dtype=np.int64) for e in tokenizer.tokenizer.encode_batch_fast(texts)]
    # Another kind a zoo checkpoint may store (WordPiece): its own encode, which adds no special tokens.
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

    def flush(self, documents_done: int) -> None:
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
        self.progress["documents_done"] = documents_done
        atomic_write(self.directory / "progress.json", json.dumps(self.progress, indent=1))


def prepare_shards(
    options: PrepareOptions,
    output_dir: Path,
    *,
    batch_bytes: int = 8_000_000,
    log=print,
    tokenizer=None,
    input_keys: tuple[str, str] = ("data.text_files", "data.val_files"),
) -> dict:
    """Make (or finish, or find made) the shards of `options` in `output_dir`; returns the manifest.

    `tokenizer`: the tokenizer `options.tokenizer` names, already loaded (LanguageModelDataModule reads a given one
    once, for its cache key), instead of loading it again. `input_keys`: what the train and val inputs are called
    in the errors that name an empty or non-UTF-8 file (split="position" reads them as plain text)."""
    check_options(options)
    output_dir.mkdir(parents=True, exist_ok=True)
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
    if progress_path.is_file():
        progress = json.loads(progress_path.read_text())
        tokenizer = _tokenizer_from(progress["tokenizer"])
        log(f"resuming after document {progress['documents_done']:,} ({progress_path})")
    else:
        tokenizer = tokenizer if tokenizer is not None else build_tokenizer(options, keys=input_keys)
        progress = {
            "options": recorded,
            "tokenizer": tokenizer.to_json(),
            "documents_done": 0,
            "documents": dict.fromkeys(SPLITS, 0),
            "shards": {s: [] for s in SPLITS},
        }
    dtype = np.dtype(np.uint16 if tokenizer.vocab_size <= 2**16 else np.uint32)
    position = options.split == "position"
    # The position split adds nothing between files: the text is one stream, as the named datasets always had it.
    separator = np.zeros(0, dtype=np.int64) if position else np.asarray([separator_id(tokenizer)], dtype=np.int64)
    shards = _ShardSet(output_dir, dtype, progress)
    done = progress["documents_done"]
    batch: list[tuple[int, str, str]] = []

    def encode_pending() -> None:
        nonlocal batch
        for (number, split, _), ids in zip(batch, encode_batch(tokenizer, [text for _, _, text in batch])):
            shards.add(split, ids)
            shards.add(split, separator)
            progress["documents"][split] += 1
            if shards.counts["train"] >= options.shard_tokens:
                shards.flush(number + 1)
        batch = []

    pending_bytes = 0
    if position:
        pieces = _position_pieces(options, whole=not isinstance(tokenizer, CharTokenizer), keys=input_keys)
    else:
        pieces = _numbered_documents(options)
    for number, split, text in pieces:
        if number < done:
            continue  # made before the interruption
        batch.append((number, split, text))
        pending_bytes += len(text)
        if pending_bytes >= batch_bytes:
            encode_pending()
            pending_bytes = 0
    encode_pending()
    total = sum(progress["documents"].values())
    shards.flush(total)
    manifest = {
        "format": FORMAT,
        "dtype": dtype.name,
        "separator_id": int(separator[0]) if len(separator) else None,
        **progress,
        "inputs": [{"path": str(Path(p).resolve()), "bytes": Path(p).stat().st_size} for p in _all_inputs(options)],
        "tokens": {s: sum(x["tokens"] for x in progress["shards"][s]) for s in SPLITS},
        "seconds": round(time.perf_counter() - started, 3),
    }
    del manifest["documents_done"]
    if not manifest["tokens"]["train"] or not manifest["tokens"]["val"]:
        empty = "train" if not manifest["tokens"]["train"] else "val"
        if position:
            raise ValueError(
                f"the {empty} split of {', '.join(options.inputs['train'])} has no tokens; give more text (or a "
                "larger data.val_fraction, or data.val_files)"
            )
        raise ValueError(
            f"the {empty} split has no documents; give more documents, a larger data.val_fraction, or "
            "data.val_files (prepare.documents=paragraphs or lines splits text files into more documents)"
        )
    atomic_write(manifest_path, json.dumps(manifest, indent=1))  # last: marks the output complete
    progress_path.unlink()
    source = f" of {len(_all_inputs(options)):,} files split by position" if position else f" from {total:,} documents"
    log(
        f"prepared {manifest['tokens']['train']:,} train / {manifest['tokens']['val']:,} val tokens{source} in "
        f"{manifest['seconds']:.1f} s: {manifest_path}"
    )
    return manifest


def check_options(options: PrepareOptions) -> None:
    if options.split not in SPLIT_MODES:
        raise ValueError(f"prepare.split must be one of {', '.join(SPLIT_MODES)}, got {options.split!r}")
    if options.split == "position" and options.documents != "file":
        raise ValueError(
            f"prepare.documents={options.documents} does not go with prepare.split=position, which reads every file "
            "whole, as plain text; leave prepare.documents=file"
        )


def recorded_options(path: Path) -> dict:
    """The options a manifest or progress file records. Files made before `split` existed split by document and
    do not name it: they are read as saying so, so that the same command still finds or finishes them."""
    return {"split": "documents", **json.loads(path.read_text())["options"]}


def _all_inputs(options: PrepareOptions) -> list[str]:
    return [*options.inputs["train"], *(options.inputs.get("val") or [])]


def _tokenizer_from(data: str):
    from .tokenizer import tokenizer_from_json

    return tokenizer_from_json(data)
