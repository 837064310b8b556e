"""Every model family's default config under every strategy it offers, with what its validation does by default:
GPT samples text, ViT draws a confusion matrix and attention rollouts, the Transformer decodes the val set for BLEU
and logs translations (beam search at test), BERT reports its masked-LM and NSP metrics.

Under FSDP every forward gathers the weights from all processes, so that work must run on every rank (rank 0 alone
writes it), and decoding loops whose ranks would stop at different steps step in lockstep (zoo.strategies.fsdp).
Here: two real processes per run (trainer=ddp_sim, and the documented trainer=fsdp command for CPUs), each run
trimmed only in steps and batches; and in one process, the lockstep contract of the decoding loops, and in two
processes, sharded decoding of different inputs per rank equal to unsharded decoding.
"""

from __future__ import annotations

import csv
import os
import re
import socket
import sys
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from zoo.core.decoding import beam_search, decode_tokens
from zoo.models.transformer import Transformer

from conftest import assert_ok, run_script

DDP = ["trainer=ddp_sim"]
# The command of docs/scale-out.md for CPU processes.
FSDP = [
    "trainer=fsdp",
    "trainer.accelerator=cpu",
    "trainer.devices=2",
    "trainer.precision=32-true",
    "trainer.strategy.param_dtype=null",
]
# trainer=fsdp as configured (bf16-mixed, parameters gathered in bf16): it runs on CPUs too.
FSDP_DEFAULT_PRECISION = ["trainer=fsdp", "trainer.accelerator=cpu", "trainer.devices=2"]
# Steps and batches only: validation at steps 2 and 4, then the final validate and test of train.py.
SHORT = [
    "trainer.max_steps=4",
    "trainer.val_check_interval=2",
    "trainer.check_val_every_n_epoch=null",
    "trainer.limit_val_batches=2",
    "+trainer.limit_test_batches=2",
    "trainer.log_every_n_steps=1",
]
STRATEGIES = {"ddp": DDP, "fsdp": FSDP}
# Smaller batches for the Transformer: an untrained model decodes every source to its length limit (greedy at
# validation, beams of 4 at test), so the default 4096 tokens a batch would decode for minutes.
BATCHES = {"model=transformer": ["data.max_tokens=512"]}
CASES = [
    pytest.param(family, strategy, STRATEGIES[strategy], id=f"{family}-{strategy}")
    for family in ("model=gpt", "model=bert", "model=vit", "model=transformer")
    for strategy in STRATEGIES
] + [pytest.param("model=gpt", "fsdp", FSDP_DEFAULT_PRECISION, id="model=gpt-fsdp-bf16")]


def _metrics(run_dir: Path) -> list[dict[str, str]]:
    return list(csv.DictReader((run_dir / "csv" / "metrics.csv").read_text().splitlines()))


def _logged(rows: list[dict[str, str]], key: str) -> int:
    return sum(1 for r in rows if r.get(key))


def _entries_per_step(path: Path) -> Counter:
    """How many texts each step logged into a text log of zoo.tasks.text_logging (`===== step N =====` each)."""
    return Counter(int(s) for s in re.findall(r"^===== step (\d+) =====$", path.read_text(), flags=re.M))


@pytest.mark.slow
@pytest.mark.parametrize(("family", "strategy", "trainer"), CASES)
def test_default_config_trains_validates_and_tests_on_two_processes(tmp_path, family, strategy, trainer):
    run_dir = tmp_path / "run"
    env = {"OMP_NUM_THREADS": "1"}  # two processes on the machine's cores
    overrides = [family, *trainer, *SHORT, *BATCHES.get(family, [])]
    result = run_script("train.py", *overrides, f"hydra.run.dir={run_dir}", env=env)
    assert_ok(result)
    assert "MEMBER: 2/2" in result.stdout + result.stderr  # two processes trained
    saved = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    assert saved["global_step"] == 4
    assert all(type(t) is torch.Tensor for t in saved["state_dict"].values())  # a full state dict, also under FSDP
    rows = _metrics(run_dir)
    # Validations at steps 2 and 4 during fit and the final validate at step 4; the test after it.
    assert _logged(rows, "val/loss") == 3 and _logged(rows, "test/loss") == 1
    logs = run_dir / "csv"
    if family == "model=gpt":
        # num_samples=2 per validation, written by rank 0 alone (both ranks sample).
        assert _entries_per_step(logs / "val_samples.txt") == {2: 2, 4: 4}
    elif family == "model=vit":
        for step in (2, 4):
            for picture in ("confusion_matrix", "attention_rollout"):
                assert (logs / "images" / f"val_{picture}_step{step:06d}.png").stat().st_size > 0
    elif family == "model=transformer":
        assert _logged(rows, "val/bleu") == 3 and _logged(rows, "test/bleu") == 1
        # num_logged_translations=4 of rank 0's translations per validation and test, written by rank 0 alone.
        assert _entries_per_step(logs / "val_translations.txt") == {2: 4, 4: 8}
        assert _entries_per_step(logs / "test_translations.txt") == {4: 4}
    elif family == "model=bert":
        assert _logged(rows, "val/mlm_acc") == 3 and _logged(rows, "val/nsp_acc") == 3


# ---- the decoding loops' lockstep, in one process -------------------------------------------------------------
def _tiny_transformer() -> Transformer:
    torch.manual_seed(0)
    model = Transformer.from_preset("transformer-tiny", src_vocab_size=30, tgt_vocab_size=30, max_len=40, dropout=0.0)
    return model.eval()


class OthersRunFor:
    """What `any_running` answers when other processes decode `extra` steps past this one's end; counts the calls."""

    def __init__(self, extra: int) -> None:
        self.extra, self.calls, self.idle = extra, 0, 0

    def __call__(self, running: bool) -> bool:
        self.calls += 1
        if running:
            return True
        self.idle += 1
        return self.idle <= self.extra


@pytest.mark.parametrize("beam_size", [1, 3])
@pytest.mark.parametrize("max_new_tokens", [6, 25])
def test_a_process_done_early_keeps_stepping_and_decodes_what_it_would_alone(beam_size, max_new_tokens):
    model = _tiny_transformer()
    src = torch.randint(4, 30, (3, 7), generator=torch.Generator().manual_seed(2))
    alone = model.generate(src, max_new_tokens=max_new_tokens, beam_size=beam_size)
    steps_alone = OthersRunFor(0)
    assert torch.equal(
        model.generate(src, max_new_tokens=max_new_tokens, beam_size=beam_size, any_running=steps_alone), alone
    )
    others = OthersRunFor(5)
    together = model.generate(src, max_new_tokens=max_new_tokens, beam_size=beam_size, any_running=others)
    assert torch.equal(together, alone)
    # One question per step and one at the end; five more steps, the last answer "none runs".
    assert others.calls == steps_alone.calls + 5


def test_the_loops_ask_before_every_step_and_step_while_any_process_runs():
    vocab = 5
    seen = []

    def next_logits(generated):
        seen.append(generated.shape[1])
        logits = torch.zeros(generated.shape[0], vocab)
        logits[:, 2] = 1.0  # always token 2: EOS at once for eos_token_id=2
        return logits

    out = decode_tokens(next_logits, 10, batch_size=2, device="cpu", eos_token_id=2, any_running=OthersRunFor(3))
    assert out.tolist() == [[2], [2]]  # what it decodes alone
    assert seen == [0, 1, 2, 3]  # its own step, then three in step with the others
    seen.clear()
    # No step of its own (max_new_tokens=0), and still two with the others.
    out = beam_search(
        next_logits,
        0,
        batch_size=1,
        beam_size=2,
        eos_token_id=2,
        pad_token_id=0,
        device="cpu",
        any_running=OthersRunFor(2),
    )
    assert out.shape == (1, 0) and seen == [0, 1]


# ---- sharded decoding on two processes ----------------------------------------------------------------------------
def _sharded_decoding(rank: int, port: int, folder: str) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    from torch.distributed.device_mesh import init_device_mesh

    from zoo.strategies.fsdp import lockstep, shard_per_block

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2, timeout=timedelta(seconds=60)
    )
    try:
        mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("data_parallel",))
        plain, sharded = _tiny_transformer(), _tiny_transformer()
        shard_per_block(sharded, mesh)
        # Different inputs per rank: rank 1's are longer and may stop later (or sooner) than rank 0's.
        src = torch.randint(4, 30, (2 + rank, 5 + 6 * rank), generator=torch.Generator().manual_seed(10 + rank))
        results = {}
        for beam in (1, 3):
            for limit in (4 + 20 * rank, 30 - 20 * rank):  # rank 0 or rank 1 asks for more steps
                key = f"beam{beam}_limit{limit}"
                alone = plain.generate(src, max_new_tokens=limit, beam_size=beam)
                together = sharded.generate(src, max_new_tokens=limit, beam_size=beam, any_running=lockstep(sharded))
                results[key] = torch.equal(alone, together)
        torch.save(results, Path(folder) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_sharded_ranks_decode_their_own_inputs_in_lockstep(tmp_path):
    """Two processes, a Transformer sharded over both, each translating its own sources (other lengths, other
    stopping steps, greedy and beam): each gets what the unsharded model decodes for it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    context = mp.get_context("spawn")
    sys.stdout.flush()
    processes = [context.Process(target=_sharded_decoding, args=(rank, port, str(tmp_path))) for rank in (0, 1)]
    for p in processes:
        p.start()
    for p in processes:
        p.join(timeout=300)
    assert [p.exitcode for p in processes] == [0, 0]
    for rank in (0, 1):
        results = torch.load(tmp_path / f"rank{rank}.pt", weights_only=True)
        assert results and all(results.values()), (rank, results)
