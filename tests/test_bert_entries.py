"""BERT through the train and eval entries (run in this process: tests/trained.py): pretraining, SST-2 fine-tuning
(from scratch, from a zoo checkpoint, from a Hugging Face directory), evaluation, and one-line errors for bad input.
Small data and few steps; the pretraining and from-scratch SST-2 runs are the session's (tests/trained.py)."""

from __future__ import annotations

import csv

import pytest
import torch
from trained import evaluate_in_process, train_in_process, train_refused

QUICK = [
    "trainer.max_steps=3",
    "trainer.val_check_interval=3",
    "trainer.limit_val_batches=2",
    "trainer.log_every_n_steps=1",
    "callbacks.progress_bar=null",
]
SMALL_WIKI = ["data.max_documents=12", "data.dupe_factor=1", "data.batch_size=8"]
SMALL_SST2 = ["data.max_train_rows=400", "data.max_val_rows=64", "data.batch_size=8", "data.vocab_size=800"]


def metrics(run_dir) -> list[dict]:
    return list(csv.DictReader(open(run_dir / "csv" / "metrics.csv")))


def test_fast_dev_run_of_model_bert(tmp_path):
    result = train_in_process("model=bert", "trainer.fast_dev_run=true", f"hydra.run.dir={tmp_path}")
    assert "Running in `fast_dev_run` mode" in result.stdout + result.stderr


@pytest.fixture(scope="module")
def pretrained_run(bert_mlm_run):
    """experiment=bert_pretrain_wikitext2 with QUICK and SMALL_WIKI, test=false (tests/trained.py, BERT_MLM_RUN)."""
    return bert_mlm_run


def test_pretraining_experiment_logs_mlm_and_nsp_metrics(pretrained_run):
    rows = metrics(pretrained_run)
    for name in ("train/loss", "train/mlm_loss", "train/nsp_loss", "val/mlm_acc", "val/mlm_ppl", "val/nsp_acc"):
        assert any(r.get(name) for r in rows), name
    val = next(r for r in rows if r.get("val/loss"))
    assert float(val["val/loss"]) == pytest.approx(float(val["val/mlm_loss"]) + float(val["val/nsp_loss"]), rel=1e-4)
    assert float(val["val/mlm_ppl"]) == pytest.approx(torch.tensor(float(val["val/mlm_loss"])).exp().item(), rel=1e-4)
    checkpoint = torch.load(pretrained_run / "checkpoints" / "last.ckpt", weights_only=True)
    info = checkpoint["zoo"]
    assert info["task"] == "mlm_nsp" and info["model_type"] == "bert"
    assert info["model_config"]["hidden_size"] == 256 and info["model_config"]["head"] == "pretraining"
    assert '"wordpiece"' in info["tokenizer"]


def test_eval_of_a_pretraining_checkpoint(pretrained_run, tmp_path):
    result = evaluate_in_process(
        f"ckpt_path={pretrained_run / 'checkpoints' / 'last.ckpt'}",
        "split=val",
        "trainer.limit_val_batches=2",
        f"hydra.run.dir={tmp_path}",
    )
    assert "val/mlm_acc" in result.stdout and "val/nsp_acc" in result.stdout


def test_sst2_experiment_from_scratch(sst2_run):
    """experiment=bert_sst2 with QUICK and SMALL_SST2 (rows of 24 tokens): the session's run (tests/trained.py)."""
    rows = metrics(sst2_run)
    assert any(r.get("val/acc") for r in rows) and any(r.get("val/f1") for r in rows)
    info = torch.load(sst2_run / "checkpoints" / "last.ckpt", weights_only=True)["zoo"]
    assert info["task"] == "sequence_classification" and info["model_config"]["num_labels"] == 2


def test_sst2_with_a_masked_lm_phase_on_its_own_text(tmp_path):
    """model.mlm_steps=2: steps 0-1 minimize the masked-LM loss, the rest the classifier's; the checkpoint evaluates
    (its task rebuilds the MLM head it holds) and its model config is a plain classifier's."""
    result = train_in_process(
        "experiment=bert_sst2",
        *QUICK,
        *SMALL_SST2,
        "model.mlm_steps=2",
        "trainer.max_steps=4",
        "trainer.val_check_interval=4",
        "test=false",
        f"hydra.run.dir={tmp_path}",
    )
    losses = {int(r["step"]): float(r["train/loss"]) for r in metrics(tmp_path) if r.get("train/loss")}
    # A masked LM over an 800-token vocabulary starts near ln(800) = 6.7, the 2-way classifier near ln(2) = 0.69.
    assert sorted(losses) == [0, 1, 2, 3]
    assert min(losses[0], losses[1]) > 5.0 and max(losses[2], losses[3]) < 1.2
    assert "masked-LM phase done after 2 steps" in result.stdout + result.stderr
    ckpt = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert ckpt["zoo"]["model_config"]["head"] == "classification"
    assert any(k.startswith("task_mlm.head.") for k in ckpt["state_dict"])
    result = evaluate_in_process(
        f"ckpt_path={tmp_path / 'checkpoints' / 'last.ckpt'}", "split=val", f"hydra.run.dir={tmp_path / 'e'}"
    )
    assert "val/acc" in result.stdout


def test_sst2_fine_tunes_a_zoo_pretraining_checkpoint(pretrained_run, tmp_path):
    """model.pretrained=<.ckpt>: the encoder and its WordPiece come from the checkpoint, the classifier is new."""
    ckpt = pretrained_run / "checkpoints" / "last.ckpt"
    result = train_in_process(
        "experiment=bert_sst2",
        *QUICK,
        *SMALL_SST2,
        f"model.pretrained={ckpt}",
        "test=false",
        f"hydra.run.dir={tmp_path}",
    )
    assert "newly initialized: classifier.bias, classifier.weight" in result.stdout + result.stderr
    source = torch.load(ckpt, weights_only=True)
    tuned = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert tuned["zoo"]["tokenizer"] == source["zoo"]["tokenizer"]
    assert tuned["zoo"]["model_config"]["vocab_size"] == source["zoo"]["model_config"]["vocab_size"]
    emb = "net.tok_emb.weight"
    assert tuned["state_dict"][emb].shape == source["state_dict"][emb].shape


def test_sst2_fine_tunes_a_hugging_face_directory(tmp_path, data_dir):
    """model.pretrained=<HF BertForPreTraining dir with vocab.txt>: sizes and vocabulary come from it."""
    transformers = pytest.importorskip("transformers")
    from zoo.data import WordPieceTokenizer

    lines = (data_dir / "sst2" / "train.tsv").read_text().splitlines()[1:3000]
    tokenizer = WordPieceTokenizer.train([line.split("\t")[0] for line in lines], 600)
    hf_dir = tmp_path / "hf"
    tokenizer.save_vocab(hf_dir)
    config = transformers.BertConfig(
        vocab_size=600,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    transformers.BertForPreTraining(config).save_pretrained(hf_dir)
    run_dir = tmp_path / "run"
    train_in_process(
        "experiment=bert_sst2",
        *QUICK,
        *SMALL_SST2,
        f"model.pretrained={hf_dir}",
        "test=false",
        f"hydra.run.dir={run_dir}",
    )
    info = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["zoo"]
    assert info["model_config"]["hidden_size"] == 32 and info["model_config"]["vocab_size"] == 600


@pytest.mark.parametrize(
    "overrides, fragments",
    [
        (["model=bert", "model.net.name=bert-huge"], ["unknown BERT preset 'bert-huge'", "bert-medium"]),
        (
            ["model=bert", "model.net.hidden_size=100", "model.net.num_attention_heads=12"],
            ["hidden_size=100 is not divisible by num_attention_heads=12"],
        ),
        (["model=bert", "data.vocab_file=/nowhere/vocab.txt"], ["vocab file not found", "/nowhere/vocab.txt"]),
        (["experiment=bert_sst2", "data.val_file=sst2/test.tsv"], ["test.tsv", "no label column 'label'"]),
    ],
)
def test_bad_input_is_a_one_line_error(tmp_path, overrides, fragments):
    result = train_refused(*overrides, f"hydra.run.dir={tmp_path}")
    for fragment in fragments:
        assert fragment in result.line
