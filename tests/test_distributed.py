"""Real multi-process training on CPU over gloo: DDP equals one process; a simulated 2-node torchrun job runs."""

from __future__ import annotations

import csv
import fcntl
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import hydra
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from zoo.data.prepare_lock import lock_file

from conftest import ROOT, run_script

pytestmark = pytest.mark.slow

RUN = [
    "trainer.max_steps=10",
    "trainer.val_check_interval=10",
    "trainer.limit_val_batches=4",
    "test=false",
    "trainer.deterministic=true",
    "model.num_samples=0",
    "callbacks.progress_bar=null",
    "seed=3",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("given_dir", [True, False], ids=["hydra.run.dir", "the command of docs/scale-out.md"])
def test_simulated_two_node_torchrun_job(tmp_path, given_dir):
    """torchrun --nnodes=2 --nproc-per-node=1 on localhost: Lightning reads ranks from the environment. Without
    hydra.run.dir each node composes its own `${now}`; the job still writes one run directory, rank 0's."""
    port, run_dir, log_dir = _free_port(), tmp_path / "multinode", tmp_path / "logs"
    where = f"hydra.run.dir={run_dir}" if given_dir else f"paths.log_dir={log_dir}"
    nodes = []
    for node_rank in (0, 1):
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes=2",
            "--nproc-per-node=1",
            f"--node-rank={node_rank}",
            "--master-addr=127.0.0.1",
            f"--master-port={port}",
            str(ROOT / "train.py"),
            "trainer=multinode",
            "trainer.accelerator=cpu",
            "trainer.devices=1",
            "trainer.precision=32-true",
            "trainer.max_steps=4",
            "trainer.val_check_interval=2",
            "trainer.limit_val_batches=1",
            "test=false",
            "model.num_samples=0",
            "callbacks.progress_bar=null",
            where,
        ]
        if node_rank == 1 and not given_dir:
            time.sleep(1.5)  # the second node starts in another second, as on a real cluster
        nodes.append(
            subprocess.Popen(
                command,
                env={**os.environ, "OMP_NUM_THREADS": "1"},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outputs = [node.communicate(timeout=300) for node in nodes]
    for node, (_, err) in zip(nodes, outputs):
        assert node.returncode == 0, err[-3000:]
    logs = "".join(out + err for out, err in outputs)  # Lightning's log lines go to stdout (zoo.entry.quiet)
    assert "MEMBER: 1/2" in logs and "MEMBER: 2/2" in logs
    if not given_dir:
        (run_dir,) = (log_dir / "train" / "runs").iterdir()  # one directory for the job, not one per node
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 4


PREPARED_ONCE = {
    # Character-level shakespeare: the text is encoded into the cache when the model's vocabulary is read, before
    # the trainer exists (zoo/data/lm.py): both ranks meet at the lock.
    "lm": (["model.num_samples=0"], "preparing the encoded text", 2),
    # BERT pretraining: the sentence pairs of every pass (zoo/data/bert_pretraining.py), made in Lightning's
    # prepare_data, which runs on one process per node before a barrier: only that one meets the lock.
    "bert": (
        ["model=bert", "model.net.name=bert-tiny", "data.max_documents=12", "data.dupe_factor=2"]
        + ["data.batch_size=8", "data.vocab_size=1000", "data.block_size=64"],
        "preparing the sentence pairs",
        1,
    ),
}


def _cache_marker(overrides: list[str]) -> Path:
    """The file that completes the cache these overrides' data prepares (BERT's vocabulary is made here first)."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "zoo" / "conf"), version_base="1.3"):
        cfg = compose(config_name="train", overrides=overrides)
    OmegaConf.update(cfg, "paths.root_dir", str(ROOT), force_add=True)  # what ${zoo.start_dir:} gives
    GlobalHydra.instance().clear()
    data = hydra.utils.instantiate(cfg.data, _convert_="all")
    if hasattr(data, "pairs_folder"):
        return data.pairs_folder() / "pairs.json"
    return data._cache_folder() / "manifest.json"


@pytest.mark.parametrize("data", list(PREPARED_ONCE))
def test_processes_started_together_prepare_the_data_once(tmp_path, data):
    """torchrun starts both ranks at once, each building its data before the trainer exists. The test holds the
    cache's lock until the ranks that reach it wait for it, so that they really meet there: then one prepares, the
    others wait and read what it made, and so does a later start. For the language model the ranks' data is checked to
    be one process's: the result equals a single-process run's up to float reduction order (DDP equals one process;
    Lightning's own launch of the two ranks, trainer=ddp_sim, runs in tests/test_entries.py). BERT's masks
    and dropout are drawn per rank, so there one cache folder is the check."""
    overrides, prepared, waiting = PREPARED_ONCE[data]
    run = [o for o in RUN if not o.startswith("model.num_samples")]
    common = [*overrides, *run, f"paths.cache_dir={tmp_path / 'cache'}"]
    marker = _cache_marker(common)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    command += [str(ROOT / "train.py"), "trainer=ddp_sim", *common, f"hydra.run.dir={tmp_path / 'ddp'}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HYDRA_FULL_ERROR": "0"}
    log = tmp_path / "ddp.log"
    marker.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as output, open(lock_file(marker), "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        job = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 300
            while log.read_text().count("waiting for another process") < waiting and job.poll() is None:
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.2)
            fcntl.flock(held, fcntl.LOCK_UN)
            job.wait(timeout=600)
        finally:
            if job.poll() is None:
                job.kill()
    logs = log.read_text()
    assert job.returncode == 0, logs[-3000:]
    assert logs.count("waiting for another process") == waiting and logs.count(prepared) == 1, logs[-3000:]
    single = run_script("train.py", "trainer=cpu", *common, f"hydra.run.dir={tmp_path / 'cpu'}")
    assert single.returncode == 0, single.stderr[-3000:]
    assert "preparing" not in single.stdout + single.stderr  # the cache the ranks made
    values = [json.loads((tmp_path / run / "result.json").read_text())["value"] for run in ("ddp", "cpu")]
    if data == "lm":  # the same global batch (12 = 2 ranks x 6): the ranks see the single process's samples
        assert values[0] == pytest.approx(values[1], rel=1e-5, abs=1e-5)
        assert values[1] < 4.0  # it trained
    else:
        assert len(list((tmp_path / "cache").glob("*-pairs-*"))) == 1


def test_two_process_ddp_trains_through_a_masked_lm_phase(tmp_path):
    """Each phase leaves some parameters idle (the classifier, then the MLM head); DDP's reducer, which waits
    for a gradient of every parameter, must still get through both phases and the switch."""
    result = run_script(
        "train.py",
        "trainer=ddp_sim",
        "experiment=bert_sst2",
        "model.net.name=bert-tiny",
        "model.mlm_steps=2",
        "data.max_train_rows=96",
        "data.max_val_rows=16",
        "data.batch_size=8",
        "data.vocab_size=800",
        "trainer.max_steps=4",
        "trainer.val_check_interval=4",
        "trainer.limit_val_batches=1",
        "trainer.log_every_n_steps=1",
        "callbacks.progress_bar=null",
        "test=false",
        f"hydra.run.dir={tmp_path}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    with open(tmp_path / "csv" / "metrics.csv") as f:
        losses = {int(r["step"]): float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")}
    assert sorted(losses) == [0, 1, 2, 3] and min(losses[0], losses[1]) > 5.0 > 1.2 > max(losses[2], losses[3])
