"""Tests of the BERT data: WordPiece tokenizer, documents and sentences, NSP pairs, MLM masking, the pretraining
DataModule on WikiText-2 and the GLUE/SST-2 TSV DataModule (real files from ZOO_DATA_DIR)."""

from __future__ import annotations

import random

import pytest
import torch

from zoo.data import BertPretrainingDataModule, GlueDataModule, WordPieceTokenizer
from zoo.data.bert_pretraining import make_nsp_pairs, mask_tokens, read_documents, split_sentences
from zoo.data.glue import read_tsv

SPECIAL = (0, 1, 2, 3, 4)  # [PAD] [UNK] [CLS] [SEP] [MASK] of a trained WordPiece


# --------------------------------------------------------------------------------------------------------------
# WordPiece


@pytest.fixture(scope="module")
def wiki_text(data_dir) -> str:
    return (data_dir / "wikitext2" / "wiki.valid.raw").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def wordpiece(wiki_text) -> WordPieceTokenizer:
    return WordPieceTokenizer.train(wiki_text.splitlines(), 2000)


def test_trained_wordpiece_has_bert_special_tokens_first(wordpiece):
    vocab = wordpiece.tokenizer.get_vocab()
    assert [vocab[t] for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")] == list(SPECIAL)
    assert wordpiece.vocab_size == 2000 and any(t.startswith("##") for t in vocab)
    ids = wordpiece.encode("The European lobster")
    assert wordpiece.decode(ids) == "the european lobster"  # lowercased by default


def test_wordpiece_training_is_deterministic(wiki_text, wordpiece):
    """`tokenizers` numbers the "##" pieces in hash-map order (huggingface/tokenizers#1794), which breaks ties
    between merges: unseeded, trainings on the same text differ from one call to the next."""
    lines = wiki_text.splitlines()
    vocabs = [WordPieceTokenizer.train(lines, 2000).tokenizer.get_vocab() for _ in range(3)]
    assert vocabs[0] == vocabs[1] == vocabs[2] == wordpiece.tokenizer.get_vocab()
    # The seeded pieces are ordinary vocabulary: only BERT's five tokens are matched as special in the text.
    added = wordpiece.tokenizer.get_added_tokens_decoder().values()
    assert sorted(t.content for t in added) == sorted(("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"))
    assert wordpiece.encode("##e") == wordpiece.encode("# # e")


def test_lowercase_switch():
    texts = ["Paris is in France . London is in England ."] * 50
    cased = WordPieceTokenizer.train(texts, 200, lowercase=False)
    uncased = WordPieceTokenizer.train(texts, 200, lowercase=True)
    assert cased.decode(cased.encode("Paris")) == "Paris" and uncased.decode(uncased.encode("Paris")) == "paris"
    assert not cased.lowercase and uncased.lowercase


def test_vocab_txt_round_trip_matches_hugging_face(wordpiece, tmp_path):
    """A vocab.txt loads into the same ids as transformers' BertTokenizer reading the same file."""
    transformers = pytest.importorskip("transformers")
    wordpiece.save_vocab(tmp_path)
    loaded = WordPieceTokenizer.from_vocab_file(tmp_path / "vocab.txt")
    hf = transformers.BertTokenizer.from_pretrained(tmp_path)
    text = "Homarus gammarus , known as the European lobster @-@ like , Café naïve"
    assert loaded.encode(text) == wordpiece.encode(text) == hf(text, add_special_tokens=False)["input_ids"]
    ids, segments = loaded.build_pair(loaded.encode("a b"), loaded.encode("c"))
    expected = hf("a b", "c")
    assert ids == expected["input_ids"] and segments == expected["token_type_ids"]


def test_missing_vocab_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"vocab file not found: .*nowhere.*vocab\.txt"):
        WordPieceTokenizer.from_vocab_file(tmp_path / "nowhere" / "vocab.txt")


# --------------------------------------------------------------------------------------------------------------
# Documents, sentences, NSP pairs


@pytest.mark.full_data  # all 60 articles of wiki.valid.raw
def test_wikitext_articles_split_at_titles(wiki_text):
    documents = read_documents(wiki_text, "wikitext")
    assert len(documents) == 60  # wiki.valid.raw has 60 ` = Title = ` lines
    assert documents[0][0].startswith("Homarus gammarus , known as the European lobster")
    assert documents[0][1] == "It is closely related to the American lobster , H. americanus ."
    assert not any(s.startswith("=") for d in documents for s in d)  # headings dropped


def test_blank_lines_separate_documents():
    text = "First doc. It has two sentences.\nAnd a second line!\n\n\nSecond doc? Yes.\n"
    assert read_documents(text, "blank_lines") == [
        ["First doc.", "It has two sentences.", "And a second line!"],
        ["Second doc?", "Yes."],
    ]
    assert split_sentences("Dr. smith went home. Then 3 cats came .") == ["Dr. smith went home.", "Then 3 cats came ."]


def _synthetic_documents(n_docs=40, seed=0):
    """Tokens encode where they come from: doc * 10000 + position in the document."""
    rng = random.Random(seed)
    documents = []
    for d in range(n_docs):
        position, sentences = 0, []
        for _ in range(rng.randint(1, 12)):
            length = rng.randint(3, 20)
            sentences.append([d * 10000 + position + k for k in range(length)])
            position += length
        documents.append(sentences)
    return documents


def test_nsp_pairs_follow_the_recipe():
    documents = _synthetic_documents()
    pairs = [p for seed in range(8) for p in make_nsp_pairs(documents, 48, random.Random(seed))]
    labels = [p.is_random_next for p in pairs]
    assert len(pairs) > 600
    assert 0.42 < sum(labels) / len(labels) < 0.62  # about half (a one-sentence chunk always takes a random B)
    for p in pairs:
        assert len(p.tokens_a) >= 1 and len(p.tokens_b) >= 1 and len(p.tokens_a) + len(p.tokens_b) + 3 <= 48
        assert {t // 10000 for t in p.tokens_a} == {p.document_a}
        assert {t // 10000 for t in p.tokens_b} == {p.document_b}
        if p.is_random_next:
            assert p.document_b != p.document_a  # a random B never comes from A's document
        else:
            assert p.document_b == p.document_a and max(p.tokens_a) < min(p.tokens_b)  # B continues A


def test_nsp_needs_two_documents():
    with pytest.raises(ValueError, match="at least 2 documents"):
        make_nsp_pairs(_synthetic_documents(1), 32, random.Random(0))


# --------------------------------------------------------------------------------------------------------------
# Masking


def test_masking_proportions_and_labels():
    """Over many draws: 15% of the maskable tokens are chosen, of those 80% [MASK] / 10% random / 10% unchanged;
    special tokens and padding are never chosen; labels are the original ids exactly where chosen, -100 elsewhere."""
    torch.manual_seed(0)
    vocab = 500
    replacement = torch.arange(5, vocab)
    ids = torch.randint(5, vocab, (400, 64))
    ids[:, 0], ids[:, 30], ids[:, -1] = 2, 3, 3
    ids[::2, 50:] = 0  # padding in half the rows
    ids[1::7, 10] = 1  # some [UNK]
    maskable = ~torch.isin(ids, torch.tensor(SPECIAL))
    inputs, labels = mask_tokens(
        ids, maskable, mask_id=4, replacement_ids=replacement, generator=torch.Generator().manual_seed(1)
    )
    chosen = labels != -100
    assert not chosen[~maskable].any()
    assert torch.equal(labels[chosen], ids[chosen])
    assert torch.equal(inputs[~chosen], ids[~chosen])
    expected = (maskable.sum(1).float() * 0.15).round()
    assert torch.equal(chosen.sum(1).float(), expected)
    n = chosen.sum().item()
    as_mask = (inputs[chosen] == 4).sum().item() / n
    unchanged = (inputs[chosen] == ids[chosen]).sum().item() / n
    replaced = 1 - as_mask - unchanged
    tolerance = 4 * (0.1 * 0.9 / n) ** 0.5  # 4 standard deviations
    assert abs(as_mask - 0.8) < 4 * (0.8 * 0.2 / n) ** 0.5
    assert abs(unchanged - 0.1 - 0.1 / len(replacement)) < tolerance  # a random draw may hit the same id
    assert abs(replaced - 0.1) < tolerance
    assert not torch.isin(inputs[chosen & (inputs != 4)], torch.tensor([0, 1, 2, 3])).any()


def test_every_row_gets_at_least_one_masked_token():
    ids = torch.tensor([[2, 7, 8, 3, 0, 0]])
    maskable = ~torch.isin(ids, torch.tensor(SPECIAL))
    _, labels = mask_tokens(ids, maskable, mask_id=4, replacement_ids=torch.arange(5, 20))
    assert (labels != -100).sum() == 1 and (labels[0, 1:3] != -100).any()


# --------------------------------------------------------------------------------------------------------------
# The pretraining DataModule on WikiText-2


@pytest.fixture(scope="module")
def pretraining_data(data_dir, cache_dir):
    dm = BertPretrainingDataModule(
        train_files=["wikitext2/wiki.valid.raw"],
        val_files=["wikitext2/wiki.test.raw"],
        dataset="wikitext2",
        document_format="wikitext",
        vocab_size=3000,
        block_size=64,
        batch_size=16,
        dupe_factor=1,
        max_documents=20,
        data_dir=str(data_dir),
        cache_dir=str(cache_dir),
    )
    dm.setup("fit")
    return dm


def test_pretraining_batches(pretraining_data):
    dm = pretraining_data
    tok = dm.tokenizer
    assert dm.model_fields == {"vocab_size": 3000, "pad_token_id": 0}
    batch = next(iter(dm.train_dataloader()))
    assert batch.input_ids.shape == (16, 64) and batch.nsp_labels.shape == (16,)
    for row in range(16):
        n = int(batch.attention_mask[row].sum())
        ids, segments = batch.input_ids[row], batch.token_type_ids[row]
        assert ids[0] == tok.cls_id and ids[n - 1] == tok.sep_id and (ids[n:] == tok.pad_id).all()
        first_sep = int((ids == tok.sep_id).nonzero()[0])
        assert (segments[: first_sep + 1] == 0).all() and (segments[first_sep + 1 : n] == 1).all()
        assert (segments[n:] == 0).all()
        assert (batch.labels[row, n:] == -100).all() and batch.labels[row, 0] == -100
    labels = dm._datasets["train"].nsp_labels
    assert 0.35 < labels.mean() < 0.65


def test_training_masks_are_redrawn_and_validation_masks_fixed(pretraining_data):
    dm = pretraining_data
    items = [dm._datasets["train"][i] for i in range(8)]
    collate = dm.train_dataloader().collate_fn
    first, second = collate(items), collate(items)
    assert torch.equal(first.attention_mask, second.attention_mask)
    assert not torch.equal(first.labels, second.labels)
    val_a, val_b = next(iter(dm.val_dataloader())), next(iter(dm.val_dataloader()))
    assert torch.equal(val_a.input_ids, val_b.input_ids) and torch.equal(val_a.labels, val_b.labels)
    assert (val_a.labels != -100).any()


def test_wordpiece_is_cached_beside_the_data(pretraining_data, data_dir, cache_dir):
    cached = list(cache_dir.glob("wikitext2-wordpiece3000-*/tokenizer.json"))
    assert len(cached) == 1
    again = BertPretrainingDataModule(
        train_files=["wikitext2/wiki.valid.raw"],
        val_files=["wikitext2/wiki.test.raw"],
        dataset="wikitext2",
        document_format="wikitext",
        vocab_size=3000,
        max_documents=20,
        data_dir=str(data_dir),
        cache_dir=str(cache_dir),
    )
    assert again.tokenizer.to_json() == pretraining_data.tokenizer.to_json()


def test_pairs_are_made_once_stored_and_equal_to_building_them(data_dir, tmp_path, monkeypatch, caplog):
    """Every dupe_factor pass's pairs, and the validation pairs with their fixed masks, are what building them in
    memory from the same seed gives; a second start maps them and makes none."""
    settings = dict(
        train_files=["wikitext2/wiki.valid.raw"],
        val_files=["wikitext2/wiki.test.raw"],
        dataset="wikitext2",
        document_format="wikitext",
        vocab_size=1000,
        block_size=48,
        batch_size=8,
        dupe_factor=2,
        max_documents=6,
        data_dir=str(data_dir),
        cache_dir=str(tmp_path),
    )
    caplog.set_level("INFO", logger="zoo.data.prepare_lock")
    dm = BertPretrainingDataModule(**settings)
    dm.setup("fit")
    assert sum("preparing the sentence pairs" in r.message for r in caplog.records) == 1
    train_docs, val_docs = dm._split()
    expected = dm.build_items(train_docs, passes=2, seed=dm.hparams.seed)
    one_pass = len(dm.build_items(train_docs, passes=1, seed=dm.hparams.seed))
    stored = dm._datasets["train"]
    assert len(stored) == len(expected) > one_pass  # both passes, each drawing its own pairs
    assert [stored[i] for i in range(len(stored))] == expected
    val = dm.build_items(val_docs, passes=1, seed=dm.hparams.seed + 1)
    collator, generator = dm.collator(), torch.Generator().manual_seed(dm.hparams.seed + 2)
    for item in val:
        inputs, labels = collator.mask(torch.tensor([item["input_ids"]]), generator)
        item["input_ids"], item["labels"] = inputs[0].tolist(), labels[0].tolist()
    assert [dm._datasets["val"][i] for i in range(len(val))] == val and len(dm._datasets["val"]) == len(val)

    def never(*args, **kwargs):
        raise AssertionError("the pairs were made again")

    caplog.clear()
    monkeypatch.setattr("zoo.data.bert_pretraining.make_nsp_pairs", never)
    again = BertPretrainingDataModule(**settings)
    again.setup("fit")
    assert not any("preparing" in r.message for r in caplog.records)
    assert again.pairs_folder() == dm.pairs_folder() and again._datasets["train"][3] == expected[3]
    # Another setting that decides the pairs is another set of pairs.
    assert BertPretrainingDataModule(**{**settings, "dupe_factor": 3}).pairs_folder() != dm.pairs_folder()


def test_missing_corpus_names_the_path(tmp_path):
    dm = BertPretrainingDataModule(train_files=["wikitext2/wiki.train.raw"], data_dir=str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"wiki\.train\.raw.*data\.train_files"):
        dm.setup("fit")


# --------------------------------------------------------------------------------------------------------------
# GLUE / SST-2


def test_sst2_datamodule(data_dir, cache_dir):
    dm = GlueDataModule(
        max_train_rows=2000,
        batch_size=8,
        block_size=32,
        vocab_size=1000,
        pad_to="longest",
        data_dir=str(data_dir),
        cache_dir=str(cache_dir),
    )
    assert dm.model_fields == {"vocab_size": 1000, "pad_token_id": 0, "num_labels": 2}
    dm.setup("fit")
    assert len(dm._datasets["train"]) == 2000 and len(dm._datasets["val"]) == 872
    batch = next(iter(dm.val_dataloader()))
    # The first dev row: "it 's a charming and often affecting journey . \t1"
    first = dm.tokenizer.decode(batch.input_ids[0, : int(batch.attention_mask[0].sum())].tolist())
    assert first.startswith("[CLS] it ' s a charming") and first.endswith("journey. [SEP]")
    assert batch.labels[0] == 1 and (batch.token_type_ids == 0).all()
    assert batch.input_ids.shape[1] == int(batch.attention_mask.sum(1).max())  # padded to the longest row


def test_sentence_pair_tsv(tmp_path, cache_dir):
    rows = ["sentence1\tsentence2\tlabel"] + [
        f"the cat sat {i}\ta dog ran far away {i}\t{'yes' if i % 2 else 'no'}" for i in range(30)
    ]
    (tmp_path / "train.tsv").write_text("\n".join(rows) + "\n")
    dm = GlueDataModule(
        train_file=str(tmp_path / "train.tsv"),
        val_file=str(tmp_path / "train.tsv"),
        dataset=None,
        vocab_size=60,
        block_size=10,
        batch_size=4,
        cache_dir=str(cache_dir),
    )
    assert dm.model_fields["num_labels"] == 2 and dm.label_names == ["no", "yes"]
    dm.setup("fit")
    item = dm._datasets["val"][1]
    tok = dm.tokenizer
    assert len(item["input_ids"]) == 10 and item["label"] == 1  # truncated to block_size; "yes" is id 1
    sep = item["input_ids"].index(tok.sep_id)
    assert item["token_type_ids"] == [0] * (sep + 1) + [1] * (10 - sep - 1)
    assert item["input_ids"][-1] == tok.sep_id


@pytest.mark.parametrize(
    "content, fragment",
    [
        ("it 's good\t1\nbad\t0\n", "no header with a text column"),
        ("sentence\tscore\ngood\t1\n", "no label column 'label'"),
        ("sentence\tlabel\ngood\t1\textra\n", "line 2: 3 tab-separated fields"),
    ],
)
def test_bad_tsv_is_named(tmp_path, content, fragment):
    path = tmp_path / "bad.tsv"
    path.write_text(content)
    with pytest.raises(ValueError) as err:
        read_tsv(path, "label", None)
    assert fragment in str(err.value) and str(path) in str(err.value)


def test_glue_test_file_without_labels_is_refused(data_dir):
    with pytest.raises(ValueError, match="no label column 'label'.*GLUE test files have no labels"):
        read_tsv(data_dir / "sst2" / "test.tsv", "label", None)


def test_length_grouped_sampler_covers_every_row_in_similar_length_batches():
    from zoo.data.glue import LengthGroupedSampler

    lengths = [random.Random(i).randint(3, 60) for i in range(1000)]
    sampler = LengthGroupedSampler(lengths, batch_size=16, seed=0)
    first, second = list(sampler), list(sampler)
    assert sorted(first) == list(range(1000)) and first != second  # a permutation, new every epoch
    batches = [first[i : i + 16] for i in range(0, 992, 16)]
    spread = sum(max(lengths[j] for j in b) - min(lengths[j] for j in b) for b in batches) / len(batches)
    assert spread < 5  # random batches of 16 would span ~50
    assert len({max(lengths[j] for j in b) for b in batches[:10]}) > 3  # batch order is shuffled, not sorted
