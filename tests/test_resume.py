"""Resume is exact: N steps, stop, resume to 2N gives the losses of an uninterrupted 2N-step run (the train entry,
run in this process: tests/trained.py)."""

from __future__ import annotations

import csv
import shutil

import pytest
from trained import train_in_process

COMMON = [
    "trainer.deterministic=true",
    "trainer.log_every_n_steps=1",
    "trainer.val_check_interval=100000",
    "validate=false",
    "test=false",
    "model.net.dropout=0.1",
    "model.num_samples=0",
    "seed=7",
    "optimized_metric=null",
]


def step_losses(run_dir) -> dict[int, str]:
    with open(run_dir / "csv" / "metrics.csv") as f:
        return {int(r["step"]): r["train/loss"] for r in csv.DictReader(f) if r.get("train/loss")}


def test_resumed_run_equals_uninterrupted_run(tmp_path):
    full, first, second = tmp_path / "full", tmp_path / "first", tmp_path / "second"
    for args in (
        ["trainer.max_steps=16", "model.scheduler.max_steps=16", f"hydra.run.dir={full}"],
        ["trainer.max_steps=8", "model.scheduler.max_steps=16", f"hydra.run.dir={first}"],
        [
            "trainer.max_steps=16",
            "model.scheduler.max_steps=16",
            f"hydra.run.dir={second}",
            f"ckpt_path={first / 'checkpoints' / 'last.ckpt'}",
        ],
    ):
        train_in_process(*COMMON, *args)
    uninterrupted, resumed = step_losses(full), step_losses(second)
    assert sorted(resumed) == list(range(8, 16))  # Lightning logs step s after s+1 optimizer steps -> 8..15
    assert {s: uninterrupted[s] for s in resumed} == resumed  # bit-identical, dropout included
    assert step_losses(first) == {s: uninterrupted[s] for s in range(8)}


# The other tasks: one uninterrupted run that also checkpoints every 4 steps, and a second run resumed from its
# step-4 checkpoint (written mid-epoch, as a preempted job's would be). Tiny models, real data, dropout on.
EVERY_4 = [
    "+callbacks.every_4._target_=lightning.pytorch.callbacks.ModelCheckpoint",
    "+callbacks.every_4.save_top_k=-1",
    "+callbacks.every_4.every_n_train_steps=4",
    "callbacks.progress_bar=null",
    "callbacks.model_summary=null",
    "trainer.num_sanity_val_steps=1",
    "trainer.limit_val_batches=1",
    "trainer.max_steps=10",
    "logger=csv",
]
QUIET = [
    "trainer.deterministic=true",
    "trainer.log_every_n_steps=1",
    "trainer.val_check_interval=100000",
    "validate=false",
    "test=false",
    "seed=7",
    "optimized_metric=null",
]

TASKS = {
    # BERT MLM+NSP: 96 pairs -> 12 steps of 8 per epoch; masks are drawn per batch.
    "bert_pretraining": [
        "model=bert",
        "model.net.name=bert-tiny",
        "model.net.hidden_dropout_prob=0.1",
        "data.max_documents=12",
        "data.dupe_factor=1",
        "data.batch_size=8",
        "data.vocab_size=1000",
        "data.block_size=64",
    ],
    # SST-2 from scratch, length-grouped batches: 80 rows -> 5 steps of 16 per epoch, so the run crosses an epoch.
    "sst2": [
        "experiment=bert_sst2",
        "model.net.name=bert-tiny",
        "data.max_train_rows=80",
        "data.max_val_rows=16",
        "data.batch_size=16",
        "data.vocab_size=800",
        "callbacks.model_checkpoint.monitor=null",
    ],
    # The same with a masked-LM phase on the training text for 6 steps: the resume at step 4 falls inside it,
    # its masks are drawn from the restored generator and the switch to the classifier happens after it.
    "sst2_mlm_phase": [
        "experiment=bert_sst2",
        "model.net.name=bert-tiny",
        "model.mlm_steps=6",
        "data.max_train_rows=80",
        "data.max_val_rows=16",
        "data.batch_size=16",
        "data.vocab_size=800",
        "callbacks.model_checkpoint.monitor=null",
    ],
    # ViT on MNIST with random crops and rotations: 96 images -> 6 steps of 16 per epoch.
    "vit_mnist": [
        "model=vit",
        "model.net.dropout=0.1",
        "data.split_sizes=[96,16,16]",
        "data.batch_size=16",
        "data.rotation=10.0",
    ],
    # The 2017 Transformer on Multi30k: token-count batches, shuffled as whole batches.
    "transformer_multi30k": [
        "model=transformer",
        "model.net.name=transformer-tiny",
        "model.net.dropout=0.1",
        "data.max_tokens=256",
        "data.vocab_size=1000",
        "model.bleu_every_n_val=0",
    ],
}


@pytest.mark.parametrize("task", list(TASKS))
def test_every_task_resumes_exactly(tmp_path, task):
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    train_in_process(*TASKS[task], *QUIET, *EVERY_4, f"hydra.run.dir={full}")
    (written,) = full.rglob("*step=4.ckpt")
    step_4 = shutil.copy(written, tmp_path / "step_4.ckpt")  # "=" has a meaning in an override
    train_in_process(*TASKS[task], *QUIET, *EVERY_4, f"hydra.run.dir={resumed}", f"ckpt_path={step_4}")
    uninterrupted, continued = step_losses(full), step_losses(resumed)
    assert sorted(continued) == list(range(4, 10)) and sorted(uninterrupted) == list(range(10))
    assert {s: uninterrupted[s] for s in continued} == continued  # bit-identical, dropout and random data included
    with open(full / "csv" / "metrics.csv") as f:
        epochs = {int(r["step"]): r["epoch"] for r in csv.DictReader(f) if r.get("train/loss")}
    assert epochs[3] == epochs[4]  # the interruption fell mid-epoch


def test_rng_state_round_trips_numpy_through_a_weights_only_checkpoint(tmp_path):
    import numpy as np
    import torch

    from zoo.callbacks.rng_state import RNGStateCheckpoint

    callback = RNGStateCheckpoint()
    np.random.seed(3)
    np.random.standard_normal()  # leaves a cached Gaussian in the state
    torch.save(callback.state_dict(), tmp_path / "rng.pt")
    expected = (np.random.standard_normal(), np.random.randint(1 << 30), torch.rand(1).item())
    state = torch.load(tmp_path / "rng.pt", weights_only=True)
    callback.load_state_dict(state)
    assert (np.random.standard_normal(), np.random.randint(1 << 30), torch.rand(1).item()) == expected
    del state["numpy"]  # a checkpoint written before numpy's state was kept still loads (numpy left as it is)
    callback.load_state_dict(state)
    assert torch.rand(1).item() == expected[2]


def test_sampler_position_counts_epochs_as_the_loader_and_lightning_do():
    from zoo.data.resumable import ResumableShuffle

    def stream(sampler, batches):  # what a loader with drop_last takes, epoch after epoch
        taken = []
        while len(taken) < batches * 4:
            items = list(sampler)
            taken += items[: len(items) // 4 * 4]
        return taken[: batches * 4]

    data = list(range(50))  # 12 whole batches of 4 per epoch; the last 2 samples are dropped
    full = stream(ResumableShuffle(data, seed=1), 30)
    for steps in (5, 12, 13, 29):
        resumed = ResumableShuffle(data, seed=1)
        resumed.set_step(steps, batch_size=4)
        assert stream(resumed, 30 - steps) == full[steps * 4 :]
    # accumulate_grad_batches=5: an epoch of 12 batches is 3 optimizer steps (5 + 5 + 2 batches).
    resumed = ResumableShuffle(data, seed=1)
    resumed.set_step(4, batch_size=4, accumulate=5)
    assert (resumed.epoch, resumed.start) == (1, 20)
    # limit_train_batches=3: Lightning ends an epoch after 3 batches, and the next epoch gets a new order.
    limited = ResumableShuffle(data, seed=1)
    limited.set_step(7, batch_size=4, limit_batches=3)
    assert (limited.epoch, limited.start) == (2, 4)
    first, second = list(iter(ResumableShuffle(data, seed=1))), None
    sampler = ResumableShuffle(data, seed=1)
    next(iter(sampler))  # an epoch left unfinished
    second = list(sampler)
    assert second != first and sorted(second) == data


def test_length_grouped_batches_are_shared_by_ranks_in_similar_lengths():
    import random

    from zoo.data.glue import LengthGroupedSampler

    lengths = [random.Random(i).randint(3, 60) for i in range(1000)]
    ranks = [list(LengthGroupedSampler(lengths, batch_size=8, seed=0, rank=r, world_size=2)) for r in (0, 1)]
    assert not set(ranks[0]) & set(ranks[1]) and len(ranks[0]) == len(ranks[1]) == 500
    for k in range(0, 480, 8):  # the k-th batches of the two ranks come from one global batch of 16 rows
        rows = ranks[0][k : k + 8] + ranks[1][k : k + 8]
        assert max(lengths[i] for i in rows) - min(lengths[i] for i in rows) <= 6
