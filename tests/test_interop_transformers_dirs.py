"""The way back: `model.pretrained=<dir>` reads a directory that transformers itself saved, including the
tokenizer.json-only tokenizer that transformers 5 writes for a fast tokenizer (no vocab.txt), with the same token
ids and logits as transformers."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from zoo.data import GlueDataModule  # noqa: E402
from zoo.data.wordpiece import WordPieceTokenizer, tokenizer_from_source  # noqa: E402
from zoo.interop import load_hf  # noqa: E402
from zoo.models import BERT  # noqa: E402
from zoo.tasks import SequenceClassificationTask  # noqa: E402

from conftest import assert_ok, run_script  # noqa: E402

TOL = dict(atol=1e-5, rtol=1e-5)


def sst2_sentences(data_dir, split: str, n: int) -> list[str]:
    rows = (data_dir / "sst2" / f"{split}.tsv").read_text(encoding="utf-8").splitlines()[1:]
    return [row.split("\t")[0] for row in rows[:n]]


def saved_by_transformers(directory, model_class, vocab_dir, seed: int = 0):
    """What a transformers user's `save_pretrained` leaves: a small random model of `model_class` and a fast BERT
    tokenizer over a zoo vocabulary; vocab.txt removed should this version of transformers write one."""
    tokenizer = transformers.BertTokenizerFast(vocab_file=str(vocab_dir / "vocab.txt"), do_lower_case=True)
    config = transformers.BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=96,
        max_position_embeddings=64,
        num_labels=2,
    )
    torch.manual_seed(seed)
    model = model_class(config).eval()
    with torch.no_grad():  # transformers zero-initializes biases; random ones are compared for real
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.normal_(0.0, 0.2)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    (directory / "vocab.txt").unlink(missing_ok=True)
    assert (directory / "tokenizer.json").is_file() and not (directory / "vocab.txt").exists()
    return model, transformers.AutoTokenizer.from_pretrained(directory)


@pytest.fixture(scope="module")
def vocab_dir(tmp_path_factory, data_dir):
    """A zoo WordPiece vocabulary, as a transformers user would start from (vocab.txt)."""
    zoo = WordPieceTokenizer.train(sst2_sentences(data_dir, "train", 2000), 1000)
    directory = tmp_path_factory.mktemp("vocab")
    zoo.save_vocab(directory)
    return directory


@pytest.fixture(scope="module")
def classifier_dir(tmp_path_factory, vocab_dir):
    directory = tmp_path_factory.mktemp("hf_sst2")
    model, tokenizer = saved_by_transformers(directory, transformers.BertForSequenceClassification, vocab_dir)
    return directory, model, tokenizer


def test_the_tokenizer_json_gives_transformers_ids(classifier_dir, data_dir):
    directory, _, tokenizer = classifier_dir
    ours = tokenizer_from_source(directory)
    assert ours.lowercase and ours.vocab_size == len(tokenizer)
    for sentence in sst2_sentences(data_dir, "dev", 50) + ["Ünïcödé, CJK 漢字 and a wordthatisnotinthevocab!"]:
        assert tokenizer(sentence)["input_ids"] == ours.build_pair(ours.encode(sentence))[0], sentence


@torch.no_grad()
def test_a_classifier_saved_by_transformers_fine_tunes_from_its_logits(classifier_dir, tmp_path):
    """The data module and the task both read the directory (as model.pretrained=<dir> makes them): the batch the
    zoo run would see gives transformers' logits."""
    directory, hf, _ = classifier_dir
    dm = GlueDataModule(pretrained=str(directory), block_size=64, batch_size=8, max_train_rows=64, max_val_rows=16)
    dm.prepare_data()
    dm.setup("fit")
    net = BERT.from_preset("bert-tiny", head="classification", num_labels=2, vocab_size=dm.tokenizer.vocab_size)
    task = SequenceClassificationTask(net, pretrained=str(directory), tokenizer=dm.tokenizer).eval()
    batch = next(iter(dm.val_dataloader()))
    expected = hf(
        input_ids=batch.input_ids, token_type_ids=batch.token_type_ids, attention_mask=batch.attention_mask
    ).logits
    assert expected.abs().max() > 0.1  # real numbers, not a near-zero head
    torch.testing.assert_close(task(batch), expected, **TOL)


def test_a_data_tokenizer_other_than_the_directorys_is_refused(classifier_dir, data_dir):
    """The directory has only tokenizer.json: its WordPiece table is what the data's tokenizer must be."""
    directory, _, _ = classifier_dir
    other = WordPieceTokenizer.train(sst2_sentences(data_dir, "train", 500), 300)
    net = BERT.from_preset("bert-tiny", head="classification", num_labels=2, vocab_size=other.vocab_size)
    with pytest.raises(ValueError, match="the data's tokenizer is not the vocabulary of"):
        SequenceClassificationTask(net, pretrained=str(directory), tokenizer=other)


@pytest.mark.slow
def test_train_py_starts_from_the_directory(classifier_dir, tmp_path):
    directory, _, tokenizer = classifier_dir
    result = run_script(
        "train.py",
        "experiment=bert_sst2",
        f"model.pretrained={directory}",
        "model.optimizer.lr=2e-5",
        "trainer.max_steps=2",
        "trainer.val_check_interval=2",
        "trainer.limit_val_batches=1",
        "callbacks.progress_bar=null",
        "data.max_train_rows=64",
        "data.max_val_rows=16",
        "data.batch_size=8",
        f"hydra.run.dir={tmp_path}",
    )
    assert_ok(result)
    assert "newly initialized: nothing" in result.stdout + result.stderr  # classifier included
    stored = json.loads(torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["zoo"]["tokenizer"])
    vocab = json.loads(stored["tokenizer"])["model"]["vocab"]
    assert vocab == tokenizer.get_vocab()


@torch.no_grad()
def test_a_pretraining_model_saved_by_transformers_loads_with_its_logits(tmp_path, vocab_dir, data_dir):
    hf, tokenizer = saved_by_transformers(tmp_path, transformers.BertForPreTraining, vocab_dir, seed=1)
    zoo = load_hf(tmp_path)
    ours = tokenizer_from_source(tmp_path)
    a, b = sst2_sentences(data_dir, "dev", 2)
    encoded = tokenizer(a, b, return_tensors="pt")
    ids, segments = ours.build_pair(ours.encode(a), ours.encode(b))
    assert encoded["input_ids"][0].tolist() == ids and encoded["token_type_ids"][0].tolist() == segments
    expected = hf(**encoded)
    got = zoo(encoded["input_ids"], token_type_ids=encoded["token_type_ids"])
    torch.testing.assert_close(got.mlm_logits, expected.prediction_logits, **TOL)
    torch.testing.assert_close(got.nsp_logits, expected.seq_relationship_logits, **TOL)


def test_directories_without_a_wordpiece_tokenizer_are_refused_in_one_line(tmp_path):
    with pytest.raises(FileNotFoundError, match="vocab.txt or tokenizer.json"):
        tokenizer_from_source(tmp_path)
    from tokenizers import Tokenizer, models

    Tokenizer(models.BPE()).save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(ValueError, match="holds a BPE tokenizer; a BERT needs a WordPiece"):
        tokenizer_from_source(tmp_path)
