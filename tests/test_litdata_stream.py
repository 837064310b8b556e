"""Object storage through LitData (zoo/data/litdata_stream.py), a local folder standing for the bucket: zoo's shards
written as LitData chunks hold exactly the windows of the shards, a GPT trains on them, and a run resumed from a
checkpoint (mid-epoch, and at an epoch's end) reads the batches an uninterrupted run reads and ends with its weights.
Without LitData installed, zoo still imports and the config names the extra to install."""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from test_resume import EVERY_4, QUIET, step_losses

from zoo.data.prepare import PrepareOptions, prepare_shards
from zoo.data.token_shards import TokenShardsDataModule

from conftest import ROOT, assert_ok, run_script

needs_litdata = pytest.mark.skipif(
    importlib.util.find_spec("litdata") is None,
    reason="LitData is not installed (pip install 'transformer-zoo[litdata]'; the dev extra includes it)",
)
BLOCK, BATCH = 32, 8


@pytest.fixture(scope="module")
def bucket(tmp_path_factory):
    """A small corpus as zoo-prepare shards of ~800 tokens, and those as LitData chunks of 10 windows written by two
    workers into a folder standing for the bucket: 69 training windows of 32 tokens (8 batches of 8 per epoch, also
    on two ranks) and 15 validation windows (a batch for each of two ranks)."""
    from zoo.data.litdata_stream import main

    root = tmp_path_factory.mktemp("litdata")
    text = root / "corpus.txt"
    text.write_text("".join(f"paragraph {i}: my own text, in shards.\n\n" for i in range(70)))
    inputs = {"train": [str(text)], "val": None}
    kinds = {"tokenizer": "char", "documents": "paragraphs"}
    options = PrepareOptions(**kinds, shard_tokens=800, val_fraction=0.2, inputs=inputs)
    prepare_shards(options, root / "shards", log=lambda _: None)
    args = ["--shards", str(root / "shards"), "--output", str(root / "bucket"), "--block-size", str(BLOCK)]
    main(["optimize", *args, "--chunk-windows", "10", "--num-workers", "2"])
    return root / "shards", root / "bucket"


def test_zoo_imports_without_litdata_and_the_config_names_the_extra(tmp_path):
    """With litdata unimportable, zoo.data (which registers the DataModule) imports; using it names the extra."""
    script = (
        "import sys; sys.modules['litdata'] = None\n"  # None in sys.modules: `import litdata` raises ImportError
        "import zoo, zoo.data, zoo.data.litdata_stream as ls\n"
        f"try:\n    ls.LitDataDataModule(input_dir={str(tmp_path)!r})\n"
        "except ImportError as error:\n    print(error)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert_ok(result)
    assert "pip install 'transformer-zoo[litdata]'" in result.stdout


@needs_litdata
def test_the_chunks_hold_the_windows_of_the_shards(bucket):
    import litdata

    shards, output = bucket
    meta = json.loads((output / "zoo.json").read_text())
    source = TokenShardsDataModule(str(shards), block_size=BLOCK)
    assert meta["block_size"] == BLOCK and meta["tokenizer"] == source.tokenizer.to_json()
    for split in ("train", "val"):
        tokens = source.tokens(split)
        expected = [tokens[i * BLOCK : (i + 1) * BLOCK + 1] for i in range((len(tokens) - 1) // BLOCK)]
        stored = litdata.StreamingDataset(str(output / split), item_loader=litdata.TokensLoader(block_size=BLOCK + 1))
        assert len(stored) == len(expected) == meta[split]["windows"]
        for i, window in enumerate(expected):  # in order: the two writers kept the windows' numbers
            np.testing.assert_array_equal(np.asarray(stored[i]), window)


@needs_litdata
def test_a_language_model_data_modules_windows_are_written_too(tmp_path):
    """optimize_windows takes any TokenWindowsDataModule: here the cached memmaps of text files (data=text_files)."""
    import litdata

    from zoo.data import LanguageModelDataModule
    from zoo.data.litdata_stream import optimize_windows

    text = tmp_path / "mine.txt"
    text.write_text("hello world, this is my own text.\n" * 40)
    data = LanguageModelDataModule(dataset=None, text_files=[str(text)], block_size=16, cache_dir=str(tmp_path / "c"))
    meta = optimize_windows(data, str(tmp_path / "bucket"), block_size=16, chunk_windows=8)
    tokens = data.tokens("val")
    stored = litdata.StreamingDataset(str(tmp_path / "bucket" / "val"), item_loader=litdata.TokensLoader(block_size=17))
    assert len(stored) == meta["val"]["windows"] == (len(tokens) - 1) // 16
    for i in range(len(stored)):
        np.testing.assert_array_equal(np.asarray(stored[i]), tokens[i * 16 : i * 16 + 17])


@needs_litdata
def test_the_data_module_serves_shifted_windows_and_refuses_another_block_size(bucket, tmp_path):
    from zoo.data.litdata_stream import LitDataDataModule

    _, output = bucket
    data = LitDataDataModule(str(output), block_size=BLOCK, batch_size=BATCH, seed=3)
    data.setup("fit")
    x, y = next(iter(data.train_dataloader()))
    assert x.shape == y.shape == (BATCH, BLOCK) and x.dtype == torch.int64 and torch.equal(x[:, 1:], y[:, :-1])
    assert data.model_fields == {"vocab_size": data.tokenizer.vocab_size}
    assert len(data.train_dataloader()) == json.loads((output / "zoo.json").read_text())["train"]["windows"] // BATCH
    with pytest.raises(ValueError, match=f"written for {BLOCK}; set data.block_size={BLOCK}"):
        LitDataDataModule(str(output), block_size=BLOCK * 2)
    with pytest.raises(FileNotFoundError, match="no zoo.json in .*zoo.data.litdata_stream optimize"):
        LitDataDataModule(str(tmp_path), block_size=BLOCK)


@needs_litdata
@pytest.mark.slow
def test_a_litdata_run_trains_and_resumes_exactly(bucket, tmp_path):
    """12 steps checkpointed every 4, with two loader workers (LitData's state then also says which worker is next);
    resumed from step 4 (mid-epoch; the run then crosses into epoch 1) and from step 8 (the end of epoch 0): the same
    losses, epochs and final weights as the uninterrupted run."""
    _, output = bucket
    windows = json.loads((output / "zoo.json").read_text())["train"]["windows"]
    assert windows // BATCH == 8, "the corpus should give 8 batches per epoch, so that step 8 ends epoch 0"
    run = [*QUIET, *EVERY_4, "data=litdata", f"data.input_dir={output}", f"data.block_size={BLOCK}"]
    run += [f"data.batch_size={BATCH}", "model.net.name=gpt-nano", "model.net.dropout=0.1", "model.num_samples=0"]
    run += ["trainer.max_steps=12", "data.num_workers=2"]
    full = tmp_path / "full"
    assert_ok(run_script("train.py", *run, f"hydra.run.dir={full}"))
    uninterrupted = step_losses(full)
    losses = [float(uninterrupted[s]) for s in range(12)]
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]  # it trains
    final = torch.load(full / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    assert step_epochs(full)[7] == "0" and step_epochs(full)[8] == "1"
    for step in (4, 8):
        (written,) = full.rglob(f"*step={step}.ckpt")
        checkpoint = shutil.copy(written, tmp_path / f"step_{step}.ckpt")  # "=" has a meaning in an override
        resumed = tmp_path / f"resumed_{step}"
        assert_ok(run_script("train.py", *run, f"hydra.run.dir={resumed}", f"ckpt_path={checkpoint}"))
        continued = step_losses(resumed)
        assert sorted(continued) == list(range(step, 12))
        assert {s: uninterrupted[s] for s in continued} == continued  # bit-identical: the same batches, same masks
        assert step_epochs(resumed) == {s: e for s, e in step_epochs(full).items() if s >= step}  # no extra epoch
        weights = torch.load(resumed / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
        assert all(torch.equal(weights[k], final[k]) for k in final)


def step_epochs(run_dir) -> dict[int, str]:
    with open(run_dir / "csv" / "metrics.csv") as f:
        return {int(r["step"]): r["epoch"] for r in csv.DictReader(f) if r.get("train/loss")}


@needs_litdata
@pytest.mark.slow
def test_a_two_process_litdata_run_resumes_exactly(bucket, tmp_path):
    """DDP over gloo: LitData gives each rank its share of the windows, the checkpoint holds the loader's state
    (rank 0's, as every rank's position is the same count of batches) and both ranks resume from it: a run resumed
    at step 4 ends with the uninterrupted run's losses and weights."""
    _, output = bucket
    run = [*QUIET, *EVERY_4, "trainer=ddp_sim", "data=litdata", f"data.input_dir={output}", f"data.block_size={BLOCK}"]
    run += [f"data.batch_size={BATCH}", "model.net.name=gpt-nano", "model.net.dropout=0.1", "model.num_samples=0"]
    run += ["trainer.max_steps=8", "trainer.num_sanity_val_steps=0"]
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    assert_ok(run_script("train.py", *run, f"hydra.run.dir={full}"))
    (written,) = full.rglob("*step=4.ckpt")
    checkpoint = shutil.copy(written, tmp_path / "step_4.ckpt")
    assert_ok(run_script("train.py", *run, f"hydra.run.dir={resumed}", f"ckpt_path={checkpoint}"))
    uninterrupted, continued = step_losses(full), step_losses(resumed)
    assert sorted(continued) == list(range(4, 8))
    assert {s: uninterrupted[s] for s in continued} == continued
    final = torch.load(full / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    weights = torch.load(resumed / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    assert all(torch.equal(weights[k], final[k]) for k in final)
