"""Translation data: the BPE tokenizers, parallel-file checks, token-count batching, and Multi30k itself."""

from __future__ import annotations

import gzip
import unicodedata
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from zoo.data import TranslationDataModule, TranslationTokenizer
from zoo.data.translation import make_batches, read_lines, read_parallel
from zoo.data.translation_tokenizer import BOS_ID, EOS_ID, PAD_ID

SPLITS = ("train", "val", "test_2016_flickr")


def write_gz(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path


def fake_multi30k(root: Path, de: list[str], en: list[str]) -> Path:
    """A data folder with Multi30k's layout holding the given sentences in every split."""
    for split in SPLITS:
        write_gz(root / "multi30k" / f"{split}.de.gz", de)
        write_gz(root / "multi30k" / f"{split}.en.gz", en)
    return root


@pytest.fixture(scope="module")
def multi30k(data_dir, tmp_path_factory) -> TranslationDataModule:
    """The real Multi30k, de->en, with a small joint BPE (fast to train) in a private cache."""
    dm = TranslationDataModule(
        vocab_size=2000, max_tokens=1024, data_dir=str(data_dir), cache_dir=str(tmp_path_factory.mktemp("mt-cache"))
    )
    dm.setup("fit")
    return dm


# --------------------------------------------------------------------------------------------------------------
# Tokenizer


def test_bpe_detokenizes_multi30k_exactly(multi30k, data_dir):
    """Encoding then decoding gives back every val sentence (English and German) character for character, up to
    NFKC normalization (a no-break space in "120\xa0cm" becomes a space)."""
    tok = multi30k.tokenizer
    for lang in ("en", "de"):
        lines = read_lines(data_dir / "multi30k" / f"val.{lang}.gz")
        decoded = [tok.decode(tok.encode_target(s)) for s in lines]
        assert decoded == [unicodedata.normalize("NFKC", s) for s in lines]
    assert tok.encode_source("Ein Hund.")[-1] == EOS_ID and EOS_ID not in tok.encode_target("A dog.")


def test_tokenizer_special_ids_and_json_round_trip(multi30k):
    tok = multi30k.tokenizer
    assert tok.joint and tok.src_vocab_size == tok.tgt_vocab_size == 2000
    assert [tok.source.token_to_id(t) for t in ("<pad>", "<s>", "</s>", "<unk>")] == [PAD_ID, BOS_ID, EOS_ID, 3]
    again = TranslationTokenizer.from_json(tok.to_json())
    assert again.joint and again.encode_source("Zwei Männer.") == tok.encode_source("Zwei Männer.")
    assert again.decode([BOS_ID, *tok.encode_target("Two men."), EOS_ID, 57, PAD_ID]) == "Two men."
    with pytest.raises(ValueError, match="not a translation tokenizer"):
        TranslationTokenizer.from_json('{"kind": "bpe"}')


def test_separate_vocabularies():
    tok = TranslationTokenizer.train(
        ["ein Hund läuft", "zwei Katzen"] * 50,
        ["a dog runs", "two cats"] * 50,
        vocab_size=60,
        joint=False,
        source_lang="de",
        target_lang="en",
    )
    assert not tok.joint and tok.source is not tok.target
    assert tok.source.token_to_id("ä") is not None and tok.target.token_to_id("ä") is None
    assert tok.decode(tok.encode_target("two cats")) == "two cats"
    again = TranslationTokenizer.from_json(tok.to_json())
    assert not again.joint and again.tgt_vocab_size == tok.tgt_vocab_size


# --------------------------------------------------------------------------------------------------------------
# Parallel files and batching


def test_parallel_files_of_different_lengths_name_both_counts(tmp_path):
    de = write_gz(tmp_path / "a.de.gz", ["eins", "zwei", "drei"])
    en = write_gz(tmp_path / "a.en.gz", ["one", "two"])
    with pytest.raises(ValueError) as info:
        read_parallel(de, en)
    message = str(info.value)
    assert "a.de.gz has 3 lines" in message and "a.en.gz has 2" in message


def test_pairs_with_an_empty_side_are_skipped_with_a_warning(tmp_path):
    de = write_gz(tmp_path / "a.de.gz", ["eins", "", "drei", "vier"])
    en = write_gz(tmp_path / "a.en.gz", ["one", "two", "  ", "four"])
    with pytest.warns(UserWarning, match="skipped 2 pairs with an empty side"):
        assert read_parallel(de, en) == (["eins", "vier"], ["one", "four"])


def test_batches_cover_every_sentence_once_within_the_token_budget():
    rng = np.random.default_rng(0)
    src = rng.integers(2, 40, 500)
    tgt = np.maximum(2, src + rng.integers(-2, 3, 500))  # translations have similar lengths
    batches = make_batches(src, tgt, max_tokens=300, seed=1)
    assert sorted(np.concatenate(batches).tolist()) == list(range(500))
    for b in batches:
        assert len(b) * max(src[b].max(), tgt[b].max()) <= 300
    padded = sum(len(b) * max(src[b].max(), tgt[b].max()) for b in batches)
    assert padded < 1.15 * np.maximum(src, tgt).sum()  # bucketing: little padding
    assert [b.tolist() for b in make_batches(src, tgt, 300, seed=1)] == [b.tolist() for b in batches]
    assert [b.tolist() for b in make_batches(src, tgt, 300, seed=2)] != [b.tolist() for b in batches]
    huge = make_batches(np.array([5, 500]), np.array([5, 5]), max_tokens=100, seed=None)
    assert [b.tolist() for b in huge] == [[0], [1]]  # a pair over the budget goes alone


# --------------------------------------------------------------------------------------------------------------
# The DataModule on Multi30k


@pytest.mark.parametrize("which", [0, 37])
def test_batches_have_padding_masks_and_shifted_targets(multi30k, which):
    batch = multi30k.train_dataloader().dataset[which]
    src, mask, tgt_in, labels = batch.src, batch.src_mask, batch.tgt_in, batch.labels
    assert src.shape == mask.shape and tgt_in.shape == labels.shape
    assert src.shape[0] * max(src.shape[1], tgt_in.shape[1]) <= 1024 + tgt_in.shape[0]
    lengths = mask.sum(1)
    assert (src.gather(1, (lengths - 1)[:, None]) == EOS_ID).all()  # each source ends with EOS
    assert (src[mask == 0] == PAD_ID).all()
    assert (tgt_in[:, 0] == BOS_ID).all()
    words = (labels != PAD_ID) & (labels != EOS_ID)  # y: what follows BOS in the inputs
    assert (tgt_in[:, 1:][words[:, :-1]] == labels[:, :-1][words[:, :-1]]).all()  # labels = inputs shifted by one
    assert ((labels == EOS_ID).sum(1) == 1).all()
    ends = (labels != PAD_ID).sum(1) - 1
    assert (labels.gather(1, ends[:, None]) == EOS_ID).all()  # y + EOS, then padding
    assert (tgt_in != PAD_ID).sum(1).equal(ends + 1)  # BOS + y: as long as y + EOS


def test_val_batches_carry_the_raw_references(multi30k, data_dir):
    val = list(multi30k.val_dataloader())
    refs = [r for b in val for r in b.ref_text]
    assert sorted(refs) == sorted(read_lines(data_dir / "multi30k" / "val.en.gz"))
    b = val[0]
    assert multi30k.tokenizer.decode(b.labels[0].tolist()) == b.ref_text[0]
    assert sum(len(b.ref_text) for b in multi30k.test_dataloader()) == 1000


def test_model_fields_and_task_inputs(multi30k):
    assert multi30k.model_fields == dict(
        src_vocab_size=2000,
        tgt_vocab_size=2000,
        pad_token_id=PAD_ID,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        max_len=256,
    )
    assert multi30k.task_inputs["tokenizer"] is multi30k.tokenizer


def test_english_to_german_by_config(data_dir, tmp_path):
    dm = TranslationDataModule(
        source_lang="en",
        target_lang="de",
        vocab_size=2000,
        max_tokens=512,
        data_dir=str(data_dir),
        cache_dir=str(tmp_path),
    )
    dm.setup("fit")
    b = next(iter(dm.val_dataloader()))
    assert dm.tokenizer.decode(b.labels[0].tolist()) == b.ref_text[0]
    de = read_lines(data_dir / "multi30k" / "val.de.gz")
    assert set(b.ref_text) <= set(de)


def test_cache_is_reused(multi30k, data_dir):
    folder = multi30k._cache_folder()
    stamp = (folder / "tokenizer.json").stat().st_mtime_ns
    again = TranslationDataModule(vocab_size=2000, data_dir=str(data_dir), cache_dir=str(multi30k.cache_dir))
    assert again.tokenizer.to_json() == multi30k.tokenizer.to_json()
    assert (folder / "tokenizer.json").stat().st_mtime_ns == stamp


def test_global_token_budget_is_split_over_devices(multi30k):
    multi30k.trainer = SimpleNamespace(world_size=2, accumulate_grad_batches=2)
    try:
        multi30k.setup("fit")
        assert multi30k.per_device_batch_size == 256
        multi30k.trainer = SimpleNamespace(world_size=3, accumulate_grad_batches=1)
        with pytest.raises(ValueError, match="not divisible by world_size 3"):
            multi30k.setup("fit")
    finally:
        multi30k.trainer = None
        multi30k.setup("fit")


def test_long_pairs_dropped_from_training_truncated_in_evaluation(tmp_path):
    short, long_de, long_en = "ein Hund", " ".join(["Hund"] * 30), " ".join(["dog"] * 30)
    root = fake_multi30k(tmp_path / "data", [short, long_de] * 40, ["a dog", long_en] * 40)
    dm = TranslationDataModule(
        vocab_size=64, max_tokens=4096, max_length=10, data_dir=str(root), cache_dir=str(tmp_path / "cache")
    )
    dm.setup("fit")
    with pytest.warns(UserWarning, match="dropped 40 pairs longer than max_length=10"):
        train = list(dm.train_dataloader())
    assert sum(b.src.shape[0] for b in train) == 40 and max(b.src.shape[1] for b in train) <= 10
    with pytest.warns(UserWarning, match="truncated 40 pairs"):
        val = list(dm.val_dataloader())
    assert sum(b.src.shape[0] for b in val) == 80 and max(b.labels.shape[1] for b in val) <= 10
    assert all((b.src[:, -1][b.src_mask[:, -1] == 1] == EOS_ID).all() for b in val)


def test_mismatched_dataset_files_stop_setup(tmp_path):
    root = fake_multi30k(tmp_path / "data", ["eins", "zwei"] * 50, ["one", "two"] * 50)
    write_gz(root / "multi30k" / "val.en.gz", ["one"] * 7)
    dm = TranslationDataModule(vocab_size=64, data_dir=str(root), cache_dir=str(tmp_path / "cache"))
    with pytest.raises(ValueError, match="val.de.gz has 100 lines but .*val.en.gz has 7"):
        dm.setup("fit")


def test_missing_dataset_names_the_path(tmp_path):
    dm = TranslationDataModule(data_dir=str(tmp_path / "nowhere"), cache_dir=str(tmp_path))
    with pytest.raises(FileNotFoundError) as info:
        dm.setup("fit")
    assert str(tmp_path / "nowhere" / "multi30k") in str(info.value) and "ZOO_DATA_DIR" in str(info.value)


def test_bad_options():
    with pytest.raises(ValueError, match="both 'de'"):
        TranslationDataModule(source_lang="de", target_lang="de")
    with pytest.raises(ValueError, match="max_tokens > 0"):
        TranslationDataModule(max_tokens=0)
    dm = TranslationDataModule(source_lang="de", target_lang="fr")
    with pytest.raises(ValueError, match="no train.fr.gz; its languages are de, en"):
        dm.split_files("train")
