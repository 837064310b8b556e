"""Training from zoo-prepare's shards: windows read across shard boundaries, an order computed per index that is
a permutation and resumes exactly, a resumed run equal to an uninterrupted one, and damaged shards named."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
import torch

from zoo.data.counter_shuffle import CounterShuffle, KeyedPermutation
from zoo.data.prepare import PrepareOptions, prepare_shards
from zoo.data.token_shards import TokenShardsDataModule, TokenStream, read_manifest

from conftest import QUIET_SHORT_RUN, ROOT, assert_ok, run_script

SHAKESPEARE = ROOT / "zoo" / "data" / "builtin" / "tinyshakespeare.txt.gz"


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """Tiny shakespeare's speeches, characters, in shards of about 20k training tokens."""
    root = tmp_path_factory.mktemp("shards")
    text = root / "shakespeare.txt"
    text.write_bytes(gzip.decompress(SHAKESPEARE.read_bytes()))
    options = PrepareOptions(
        tokenizer="char", documents="paragraphs", shard_tokens=20_000, inputs={"train": [str(text)], "val": None}
    )
    prepare_shards(options, root / "out", log=lambda _: None)
    return root / "out"


@pytest.mark.parametrize("n", [1, 2, 7, 1000, 4097])
def test_the_keyed_order_is_a_permutation_that_depends_on_its_key(n):
    order = [KeyedPermutation(n, key=5)[i] for i in range(n)]
    assert sorted(order) == list(range(n))
    if n >= 1000:
        other = [KeyedPermutation(n, key=6)[i] for i in range(n)]
        assert order != other and order != list(range(n))


def test_the_counter_shuffle_shares_an_epoch_between_ranks_and_resumes_at_any_position():
    data = list(range(1001))
    ranks = [CounterShuffle(data, seed=3, rank=r, world_size=2) for r in range(2)]
    firsts = [list(s) for s in ranks]
    assert len(set(firsts[0]) | set(firsts[1])) == 1000 and not set(firsts[0]) & set(firsts[1])
    # A new epoch, a new order; and a sampler set to a position continues the same sequence.
    second = list(ranks[0])
    assert second != firsts[0]
    resumed = CounterShuffle(data, seed=3, rank=0, world_size=2)
    resumed.set_step(len(firsts[0]) + 123, batch_size=1)
    assert list(resumed) == second[123:]


def test_a_window_across_a_shard_boundary_reads_both_shards(shards):
    manifest = read_manifest(shards)
    train = manifest["shards"]["train"]
    files = [shards / s["file"] for s in train]
    stream = TokenStream(files, [s["tokens"] for s in train], manifest["dtype"])
    whole = np.concatenate([np.fromfile(f, dtype=manifest["dtype"]) for f in files])
    assert len(stream) == len(whole) == manifest["tokens"]["train"]
    boundary = train[0]["tokens"]
    for start, stop in ((boundary - 10, boundary + 55), (0, 65), (len(whole) - 65, len(whole)), (5, 5 + 3 * boundary)):
        np.testing.assert_array_equal(stream[start:stop], whole[start:stop])


def test_the_data_module_gives_windows_of_the_stream(shards):
    dm = TokenShardsDataModule(str(shards), block_size=32, batch_size=4, seed=1)
    dm.setup("fit")
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (4, 32) and torch.equal(x[:, 1:], y[:, :-1])
    assert dm.model_fields == {"vocab_size": dm.tokenizer.vocab_size}
    assert dm.tokenizer.decode(x[0].tolist())  # characters of the text


def test_a_split_too_short_for_the_windows_is_named(shards):
    manifest = read_manifest(shards)
    val, train = manifest["tokens"]["val"], manifest["tokens"]["train"]
    dm = TokenShardsDataModule(str(shards), block_size=val, batch_size=4)
    assert len(dm.train_dataset()) == train - val - 1
    with pytest.raises(ValueError) as refused:
        dm.eval_dataset("val")
    assert str(refused.value) == (
        f"the val split has {val} tokens, too few for windows of block_size={val} (at least {val + 2} needed); give "
        "more text (a larger data.val_fraction, or data.val_files) or a smaller data.block_size"
    )
    with pytest.raises(ValueError, match=f"^the train split has {train} tokens, too few for windows of block_size="):
        TokenShardsDataModule(str(shards), block_size=train, batch_size=4).train_dataset()


def test_missing_and_damaged_shards_are_named(shards, tmp_path):
    with pytest.raises(FileNotFoundError, match="no manifest.json in .*make the shards with zoo-prepare"):
        read_manifest(tmp_path)
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    for f in shards.iterdir():
        (damaged / f.name).write_bytes(f.read_bytes())
    first = json.loads((damaged / "manifest.json").read_text())["shards"]["train"][0]["file"]
    (damaged / first).write_bytes((damaged / first).read_bytes()[:-2])
    with pytest.raises(ValueError, match=f"{first} is missing or not the size its manifest records"):
        read_manifest(damaged)
    (damaged / first).write_bytes(b"\0\0" + (shards / first).read_bytes()[2:])
    read_manifest(damaged)  # the right size: only verify reads the bytes
    with pytest.raises(ValueError, match=f"{first} does not match its sha256"):
        read_manifest(damaged, verify=True)


@pytest.mark.slow
def test_a_run_on_shards_resumes_exactly(shards, tmp_path):
    """Windows of 64 from a training stream of several shards: 6 steps at once, or 3 and then 3 more after a
    resume, give the same losses."""
    run = [*QUIET_SHORT_RUN, "data=token_shards", f"data.shards={shards}", "trainer.log_every_n_steps=1"]
    run += ["optimized_metric=train/loss", "trainer.deterministic=true"]
    assert_ok(run_script("train.py", *run, "trainer.max_steps=6", f"hydra.run.dir={tmp_path / 'whole'}"))
    assert_ok(run_script("train.py", *run, "trainer.max_steps=3", f"hydra.run.dir={tmp_path / 'parts'}"))
    checkpoint = tmp_path / "parts" / "checkpoints" / "last.ckpt"
    assert_ok(
        run_script(
            "train.py", *run, "trainer.max_steps=6", f"ckpt_path={checkpoint}", f"hydra.run.dir={tmp_path / 'resumed'}"
        )
    )

    def losses(directory):
        lines = (directory / "csv" / "metrics.csv").read_text().splitlines()
        header = lines[0].split(",")
        rows = [dict(zip(header, line.split(","))) for line in lines[1:]]
        return {int(r["step"]): float(r["train/loss"]) for r in rows if r.get("train/loss")}

    whole, first, rest = losses(tmp_path / "whole"), losses(tmp_path / "parts"), losses(tmp_path / "resumed")
    assert sorted(whole) == list(range(6))
    assert [whole[s] for s in range(3)] == [first[s] for s in range(3)]
    assert [whole[s] for s in range(3, 6)] == pytest.approx([rest[s] for s in range(3, 6)], rel=1e-6)


def test_tag_windows_name_the_split_that_is_too_short():
    from zoo.data.char_tagging import TagWindows

    short = np.zeros(8, dtype=np.int64)
    with pytest.raises(ValueError, match=r"^the val split has 8 characters, too few for windows of block_size=16 "):
        TagWindows(short, short, short, 16, starts=[0], split="val")
