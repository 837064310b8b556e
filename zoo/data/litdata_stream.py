"""Language-model data from object storage through LitData, for clusters without a shared filesystem
(`pip install 'transformer-zoo[litdata]'`).

`python -m zoo.data.litdata_stream optimize --shards DIR --output DIR_OR_S3_URL --block-size N` cuts each split of
zoo-prepare's shards into windows of block_size + 1 tokens starting every block_size and writes them as LitData
chunks under OUTPUT/train and OUTPUT/val, beside OUTPUT/zoo.json (the tokenizer and the window size). Training
(`data=litdata data.input_dir=...`) streams them; LitData shuffles by (data.seed, epoch) and shares them between
ranks, and the loader's state travels in the checkpoint. An `s3://` URL goes through LitData's own clients.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import tempfile
from functools import partial
from pathlib import Path

import numpy as np
import torch

from .atomic import atomic_write
from .resumable import loader_generator
from .token_shards import TokenStream, read_manifest
from .token_windows import TokenWindowsDataModule
from .tokenizer import tokenizer_from_json

INSTALL = "pip install 'transformer-zoo[litdata]'"
META = "zoo.json"
SPLITS = ("train", "val")


def import_litdata():
    """litdata, imported only when used: zoo itself runs without it."""
    os.environ.setdefault("LITDATA_DISABLE_VERSION_CHECK", "1")  # no PyPI version check: runs stay offline
    try:
        import litdata
    except ImportError as error:
        raise ImportError(f"data=litdata needs the LitData package, which is not installed: {INSTALL}") from error
    return litdata


def is_remote(location: str) -> bool:
    """An object-store URL (s3://, gs://, ...); anything else is a local folder."""
    return "://" in location


def window_count(tokens: int, block_size: int) -> int:
    """Windows of block_size + 1 tokens starting every block_size tokens (DisjointWindows' layout)."""
    return max(0, (tokens - 1) // block_size)


def _windows(span: tuple[int, int], *, files: list[str], counts: list[int], dtype: str, block_size: int):
    """The windows numbered [start, stop) of one split (module-level, so that spawned workers can unpickle it)."""
    stream = TokenStream([Path(f) for f in files], counts, dtype)
    for index in range(*span):
        yield np.ascontiguousarray(stream[index * block_size : (index + 1) * block_size + 1])


def split_sources(tokens) -> tuple[list[str], list[int], str]:
    """(files, token counts, dtype) of a split's token array: zoo-prepare's shards (a TokenStream) or a
    LanguageModelDataModule's cached memmap."""
    if isinstance(tokens, TokenStream):
        counts = np.diff(np.concatenate([[0], tokens.ends])).tolist()
        return [str(m.filename) for m in tokens.maps], counts, tokens.dtype.name
    return [str(tokens.filename)], [len(tokens)], tokens.dtype.name


def optimize_windows(
    data: TokenWindowsDataModule,
    output: str,
    *,
    block_size: int,
    chunk_windows: int = 4096,
    num_workers: int = 1,
) -> dict:
    """Write the windows of `data`'s train and val splits as LitData chunks under `output` (a local folder or an
    object-store URL) and the tokenizer beside them; returns what OUTPUT/zoo.json records."""
    litdata = import_litdata()
    if block_size <= 0 or chunk_windows <= 0:
        raise ValueError(f"block_size ({block_size}) and chunk_windows ({chunk_windows}) must be positive")
    if not is_remote(output):  # a folder written again is incomplete until its new zoo.json is in place
        Path(output, META).unlink(missing_ok=True)
    data.build_splits()
    meta = {"format": "zoo-litdata-windows/1", "block_size": block_size, "tokenizer": data.tokenizer.to_json()}
    for split in SPLITS:
        files, counts, dtype = split_sources(data.tokens(split))
        total = window_count(sum(counts), block_size)
        if total == 0:
            raise ValueError(f"the {split} split has {sum(counts)} tokens: no window of {block_size + 1} fits")
        # Spans of whole chunks of exactly chunk_windows windows: no window is cut by a chunk's end.
        spans = [(a, min(a + chunk_windows, total)) for a in range(0, total, chunk_windows)]
        litdata.optimize(
            fn=partial(_windows, files=files, counts=counts, dtype=dtype, block_size=block_size),
            inputs=spans,
            output_dir=f"{output.rstrip('/')}/{split}",
            chunk_size=chunk_windows * (block_size + 1),
            item_loader=litdata.TokensLoader(),
            num_workers=min(num_workers, len(spans)),
            reorder_files=False,
            keep_data_ordered=True,  # worker w writes the spans it is given in order: the items keep their numbers
            mode="overwrite",
            # spawn (LitData's default) imports torch again in every worker; nothing here holds CUDA or threads.
            start_method="fork" if hasattr(os, "fork") else None,
            verbose=False,
        )
        meta[split] = {"windows": total, "tokens": int(sum(counts))}
    _write_meta(output, meta)
    return meta


def _write_meta(output: str, meta: dict) -> None:
    text = json.dumps(meta, indent=1)
    if not is_remote(output):
        atomic_write(Path(output, META), text)  # last, and whole: its presence says the chunks are complete
        return
    from litdata.streaming.fs_provider import _get_fs_provider

    with tempfile.TemporaryDirectory() as folder:
        local = Path(folder, META)
        local.write_text(text, encoding="utf-8")
        _get_fs_provider(output).upload_file(str(local), f"{output.rstrip('/')}/{META}")


def read_meta(input_dir: str, cache_dir: Path) -> dict:
    """OUTPUT/zoo.json of `optimize`: read in place, or fetched into the cache from object storage."""
    if is_remote(input_dir):
        from litdata.streaming.fs_provider import _get_fs_provider

        local = cache_dir / hashlib.sha256(input_dir.encode()).hexdigest()[:16] / META
        local.parent.mkdir(parents=True, exist_ok=True)
        _get_fs_provider(input_dir).download_file(f"{input_dir.rstrip('/')}/{META}", str(local))
    else:
        local = Path(input_dir, META)
        if not local.is_file():
            raise FileNotFoundError(
                f"no {META} in {Path(input_dir).resolve()}; write the LitData chunks with python -m "
                f"zoo.data.litdata_stream optimize --shards <zoo-prepare output> --output {input_dir}"
            )
    return json.loads(local.read_text(encoding="utf-8"))


def shift_collate(items: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Windows of block_size + 1 tokens -> (inputs, next-token targets), as RandomWindows gives them."""
    batch = torch.stack([torch.as_tensor(np.asarray(w, dtype=np.int64)) for w in items])
    return batch[:, :-1], batch[:, 1:]


class LitDataDataModule(TokenWindowsDataModule):
    """Causal-LM data streamed by LitData: `python train.py data=litdata data.input_dir=DIR_OR_S3_URL`. The windows
    and tokenizer are the ones `optimize` wrote, for `block_size`; evaluation reads the val windows in order."""

    task, description = "causal_lm", "a language-model text dataset"

    def __init__(self, input_dir: str, block_size: int = 64, batch_size: int = 12, **shared) -> None:
        super().__init__(**shared)
        import_litdata()  # a missing package is named first
        if block_size <= 0 or batch_size <= 0:
            raise ValueError(f"block_size ({block_size}) and batch_size ({batch_size}) must be positive")
        self.input_dir = input_dir if is_remote(input_dir) else str(Path(input_dir).resolve())
        self.meta = read_meta(self.input_dir, self.cache_dir / "litdata")
        if self.meta["block_size"] != block_size:  # the model's context follows data.block_size
            raise ValueError(
                f"data.block_size={block_size}, but the windows in {input_dir} were written for "
                f"{self.meta['block_size']}; set data.block_size={self.meta['block_size']} or optimize again"
            )
        self.block_size = block_size
        self._tokenizer = tokenizer_from_json(self.meta["tokenizer"])
        self._train_loader = None
        self._pending_state: dict | None = None

    @property
    def tokenizer(self):
        return self._tokenizer

    def _dataset(self, split: str, *, train: bool):
        litdata = import_litdata()
        location = f"{self.input_dir.rstrip('/')}/{split}"
        # Chunks fetched from a bucket land in zoo's cache; a local folder is read where it is.
        cache = str(self.cache_dir / "litdata" / split) if is_remote(self.input_dir) else None
        return litdata.StreamingDataset(
            location,
            cache_dir=cache,
            item_loader=litdata.TokensLoader(block_size=self.block_size + 1),
            shuffle=train,
            # Training keeps whole batches only. Evaluation keeps every window in one process; under DDP (None:
            # LitData's default there) every rank gets as many whole batches: a rank given no chunk would have none.
            drop_last=True if train else None,
            seed=self.seed,
        )

    def _streaming_loader(self, split: str, *, train: bool):
        from .litdata_resume import ResumableStreamingLoader

        return ResumableStreamingLoader(
            self._dataset(split, train=train),
            batch_size=self.per_device_batch_size,
            num_workers=self.num_workers,
            collate_fn=shift_collate,
            drop_last=train,
            # Making an iterator draws a seed; from the global RNG it would shift a resumed run's dropout masks.
            generator=loader_generator(self.seed),
        )

    def train_dataloader(self):
        self._train_loader = self._streaming_loader("train", train=True)
        if self._pending_state is not None:  # a resumed run: continue after the batches already trained on
            self._train_loader.resume(self._pending_state)
            self._pending_state = None
        return self._train_loader

    def val_dataloader(self):
        return self._streaming_loader("val", train=False)

    def test_dataloader(self):
        return self._streaming_loader("val", train=False)

    # Lightning keeps a DataModule's state_dict in every checkpoint and hands it back before the loaders are made.
    def state_dict(self) -> dict:
        if self._train_loader is None:
            return {}
        per_epoch = None if self.trainer is None else self.trainer.num_training_batches
        return {"train_loader": self._train_loader.state_dict(batches_per_epoch=per_epoch)}

    def load_state_dict(self, state: dict) -> None:
        self._pending_state = state.get("train_loader")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m zoo.data.litdata_stream", description="Token windows as LitData chunks (docs/data.md)"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    optimize = commands.add_parser("optimize", help="write zoo-prepare's shards as LitData chunks")
    optimize.add_argument("--shards", required=True, help="the folder zoo-prepare wrote (prepare.output_dir)")
    optimize.add_argument("--output", required=True, help="a local folder or an object-store URL (s3://bucket/path)")
    optimize.add_argument("--block-size", type=int, required=True, help="tokens per training window (data.block_size)")
    optimize.add_argument("--chunk-windows", type=int, default=4096, help="windows per LitData chunk")
    optimize.add_argument("--num-workers", type=int, default=1, help="processes litdata.optimize writes with")
    args = parser.parse_args(argv)
    from .token_shards import TokenShardsDataModule

    read_manifest(Path(args.shards))  # a missing or damaged folder is named before LitData starts
    shards = TokenShardsDataModule(args.shards, block_size=args.block_size)
    meta = optimize_windows(
        shards, args.output, block_size=args.block_size, chunk_windows=args.chunk_windows, num_workers=args.num_workers
    )
    print(f"wrote {meta['train']['windows']:,} train / {meta['val']['windows']:,} val windows to {args.output}")


if __name__ == "__main__":
    main()
