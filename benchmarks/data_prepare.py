"""zoo-prepare against `tokenizers`' own batch encoding, and its peak memory at two corpus sizes.

    python -m benchmarks.data_prepare --text FILE [FILE ...] --sizes-mb 20,80 [--json OUT]

The corpus of each size is the given text files' paragraphs, repeated in order until the size is reached, written
as JSON lines (one document per paragraph). For each size, in fresh processes (so that peak memory is the run's
own):
- `zoo-prepare` of the corpus with a given tokenizer (a byte-level BPE of 8192 tokens trained once, beforehand, on
  the smallest corpus): wall time, tokens/s, peak resident memory;
- the reference: the same documents read into memory and encoded with `Tokenizer.encode_batch` in batches of the
  same bytes, with the same tokenizer (tokens/s of encoding alone, no reading or writing counted);
- a cached start: what `python train.py data=token_shards data.shards=DIR` does with the shards before its first
  step (read the manifest, open the memory maps, draw the first training batch), its seconds and peak memory, so
  that a start's growth with the corpus shows.
The ratio zoo-prepare / reference throughput and the ratio of peak memory between the sizes are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from zoo.data.tokenizer import BPETokenizer

BATCH_BYTES = 8_000_000


def write_corpus(texts: list[Path], size_bytes: int, path: Path) -> int:
    # Paragraphs are separated by lines holding nothing but white space (WikiText's are " \n").
    paragraphs = [p for t in texts for p in re.split(r"\n\s*\n", t.read_text(encoding="utf-8")) if p.strip()]
    written, documents = 0, 0
    with path.open("w", encoding="utf-8") as f:
        while written < size_bytes:
            for paragraph in paragraphs:
                f.write(json.dumps({"text": paragraph}) + "\n")
                written += len(paragraph.encode())
                documents += 1
                if written >= size_bytes:
                    break
    return documents


def _child(code: str, *args: str) -> dict:
    """Run `code` in a fresh interpreter; it prints one JSON line, to which its peak memory is added."""
    # VmHWM, the process's own high-water mark: getrusage's ru_maxrss survives exec on Linux, so a child would
    # report this (torch-importing) parent's peak when that is higher.
    wrapper = (
        "import json, sys\n"
        f"{code}\n"
        "hwm = [line for line in open('/proc/self/status') if line.startswith('VmHWM')][0]\n"
        "result['peak_mb'] = int(hwm.split()[1]) / 1024\n"
        "print(json.dumps(result))\n"
    )
    out = subprocess.run([sys.executable, "-c", wrapper, *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"the measured process failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


PREPARE = """
import time
from pathlib import Path
from zoo.data.prepare import PrepareOptions, prepare_shards
corpus, out, tokenizer = sys.argv[1], sys.argv[2], sys.argv[3]
options = PrepareOptions(tokenizer=tokenizer, shard_tokens=50_000_000, inputs={"train": [corpus], "val": None})
start = time.perf_counter()
manifest = prepare_shards(options, Path(out), log=lambda _: None)
seconds = time.perf_counter() - start
result = {"seconds": seconds, "tokens": manifest["tokens"]["train"] + manifest["tokens"]["val"]}
"""

STARTUP = """
import time
start = time.perf_counter()
from zoo.data.token_shards import TokenShardsDataModule
imported = time.perf_counter()
data = TokenShardsDataModule(shards=sys.argv[1], block_size=256, batch_size=16)
data.setup("fit")
inputs, targets = next(iter(data.train_dataloader()))
result = {"seconds": time.perf_counter() - imported, "import_s": imported - start, "batch": list(inputs.shape)}
"""

REFERENCE = (
    """
import json as js, time
from tokenizers import Tokenizer
corpus, tokenizer = sys.argv[1], Tokenizer.from_file(sys.argv[2])
texts = [js.loads(line)["text"] for line in open(corpus, encoding="utf-8")]
batches, batch, size = [], [], 0
for text in texts:
    batch.append(text); size += len(text)
    if size >= BATCH_BYTES:
        batches.append(batch); batch, size = [], 0
batches.append(batch)
start = time.perf_counter()
tokens = sum(len(e.ids) for b in batches for e in tokenizer.encode_batch(b))
result = {"seconds": time.perf_counter() - start, "tokens": tokens}
"""
).replace("BATCH_BYTES", str(BATCH_BYTES))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--text", nargs="+", required=True, type=Path)
    parser.add_argument("--sizes-mb", default="20,80")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes_mb.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer_file = Path(tmp) / "tokenizer.json"
        for mb in sizes:
            corpus = Path(tmp) / f"corpus_{mb}mb.jsonl"
            documents = write_corpus(args.text, mb * 10**6, corpus)
            if not tokenizer_file.exists():
                texts = (json.loads(line)["text"] for line in corpus.open(encoding="utf-8"))
                BPETokenizer.train_from_documents(texts, 8192).tokenizer.save(str(tokenizer_file))
            made = _child(PREPARE, str(corpus), str(Path(tmp) / f"shards_{mb}"), str(tokenizer_file))
            reference = _child(REFERENCE, str(corpus), str(tokenizer_file))
            started = _child(STARTUP, str(Path(tmp) / f"shards_{mb}"))
            rows.append(
                {
                    "size_mb": mb,
                    "documents": documents,
                    "tokens": made["tokens"],
                    "prepare_s": made["seconds"],
                    "prepare_tokens_per_s": made["tokens"] / made["seconds"],
                    "prepare_peak_mb": made["peak_mb"],
                    "reference_tokens_per_s": reference["tokens"] / reference["seconds"],
                    "reference_peak_mb": reference["peak_mb"],
                    "cached_start_s": started["seconds"],
                    "cached_start_peak_mb": started["peak_mb"],
                }
            )
            r = rows[-1]
            print(
                f"{mb} MB ({documents:,} documents, {r['tokens']:,} tokens): zoo-prepare {r['prepare_s']:.1f} s, "
                f"{r['prepare_tokens_per_s'] / 1e6:.2f} M tokens/s, peak {r['prepare_peak_mb']:.0f} MB; "
                f"encode_batch alone {r['reference_tokens_per_s'] / 1e6:.2f} M tokens/s, "
                f"peak {r['reference_peak_mb']:.0f} MB; cached start {r['cached_start_s']:.2f} s "
                f"(after imports), peak {r['cached_start_peak_mb']:.0f} MB"
            )
    for r in rows:
        r["throughput_ratio"] = r["prepare_tokens_per_s"] / r["reference_tokens_per_s"]
    growth = rows[-1]["prepare_peak_mb"] / rows[0]["prepare_peak_mb"]
    starts = [f"{r['cached_start_s']:.2f} s / {r['cached_start_peak_mb']:.0f} MB at {r['size_mb']} MB" for r in rows]
    print(
        "zoo-prepare / encode_batch throughput: "
        + ", ".join(f"{r['throughput_ratio']:.2f}x at {r['size_mb']} MB" for r in rows)
        + f"; peak memory {rows[-1]['size_mb']} MB over {rows[0]['size_mb']} MB: {growth:.2f}x; cached start "
        + ", ".join(starts)
    )
    machine = {"cpus": os.cpu_count(), "capability": torch.backends.cpu.get_cpu_capability()}
    if args.json:
        args.json.write_text(json.dumps({"machine": machine, "rows": rows, "peak_growth": growth}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
