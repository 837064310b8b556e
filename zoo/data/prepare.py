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
from .tokenizer import EOS, BPETokenizer, CharTokenizer, load_published_tokenizer

FORMAT = "zoo-token-shards/1"
SPLITS = ("train", "val")


@dataclass(frozen=True)
class PrepareOptions:
    """Everything that decides the shards' bytes (recorded in the manifest; a resume must match them)."""

    tokenizer: str = "bpe"  # "char", "bpe" (trained here), or a path to a published tokenizer
    bpe_vocab_size: int = 4096
    val_fraction: float = 0.1  # of documents, when no val_files are given
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
    """(number, split, text) of every document, in order."""
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


def build_tokenizer(options: PrepareOptions):
    """The tokenizer the shards are encoded with: loaded, or trained on a streamed pass over the input."""
    if options.tokenizer not in ("char", "bpe"):
        return load_published_tokenizer(options.tokenizer)
    if options.tokenizer == "char":  # every character of every split must have an id
        chars: set[str] = set()
        for _, _, text in _numbered_documents(options):
            chars.update(text)
        return CharTokenizer("".join(sorted(chars | {"\n"})))

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
    # encode_batch_fast: the same ids without the character offsets of every token, which the shards do not keep.
    return [np.asarray(e.ids, dtype=np.int64) for e in tokenizer.tokenizer.encode_batch_fast(texts)]


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


def prepare_shards(options: PrepareOptions, output_dir: Path, *, batch_bytes: int = 8_000_000, log=print) -> dict:
    """Make (or finish, or find made) the shards of `options` in `output_dir`; returns the manifest."""
    output_dir.mkdir(parents=True, exist_ok=True)
    recorded = asdict(options)
    manifest_path, progress_path = output_dir / "manifest.json", output_dir / "progress.json"
    for path in (manifest_path, progress_path):
        if path.is_file() and json.loads(path.read_text())["options"] != recorded:
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
        tokenizer = build_tokenizer(options)
        progress = {
            "options": recorded,
            "tokenizer": tokenizer.to_json(),
            "documents_done": 0,
            "documents": dict.fromkeys(SPLITS, 0),
            "shards": {s: [] for s in SPLITS},
        }
    dtype = np.dtype(np.uint16 if tokenizer.vocab_size <= 2**16 else np.uint32)
    separator = np.asarray([separator_id(tokenizer)], dtype=np.int64)
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
    for number, split, text in _numbered_documents(options):
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
        "separator_id": int(separator[0]),
        **progress,
        "inputs": [{"path": str(Path(p).resolve()), "bytes": Path(p).stat().st_size} for p in _all_inputs(options)],
        "tokens": {s: sum(x["tokens"] for x in progress["shards"][s]) for s in SPLITS},
        "seconds": round(time.perf_counter() - started, 3),
    }
    del manifest["documents_done"]
    if not manifest["tokens"]["train"] or not manifest["tokens"]["val"]:
        empty = "train" if not manifest["tokens"]["train"] else "val"
        raise ValueError(
            f"the {empty} split has no documents; give more documents, a larger data.val_fraction, or "
            "data.val_files (prepare.documents=paragraphs or lines splits text files into more documents)"
        )
    atomic_write(manifest_path, json.dumps(manifest, indent=1))  # last: marks the output complete
    progress_path.unlink()
    log(
        f"prepared {manifest['tokens']['train']:,} train / {manifest['tokens']['val']:,} val tokens from "
        f"{total:,} documents in {manifest['seconds']:.1f} s: {manifest_path}"
    )
    return manifest


def _all_inputs(options: PrepareOptions) -> list[str]:
    return [*options.inputs["train"], *(options.inputs.get("val") or [])]


def _tokenizer_from(data: str):
    from .tokenizer import tokenizer_from_json

    return tokenizer_from_json(data)
