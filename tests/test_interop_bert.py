"""Tests of zoo.interop for BERT: parity with transformers' BertForPreTraining / BertForSequenceClassification /
BertModel (padding in the batch, both segment ids), round trips through save_hf, and loading errors."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers import (  # noqa: E402
    BertConfig,
    BertForPreTraining,
    BertForSequenceClassification,
    BertModel,
)

from zoo.interop import load_hf, save_hf  # noqa: E402
from zoo.models import BERT  # noqa: E402

VOCAB = 120
TOL = dict(atol=1e-5, rtol=1e-5)


def hf_config(**overrides) -> BertConfig:
    config = (
        dict(
            vocab_size=VOCAB,
            hidden_size=48,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=80,
            max_position_embeddings=40,
            type_vocab_size=2,
        )
        | overrides
    )
    return BertConfig(**config)


def make_hf(cls, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    model = cls(hf_config(**overrides)).eval()
    with torch.no_grad():  # HF zero-initializes biases and the MLM bias: randomize so they are really compared
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.normal_(0.0, 0.1)
    return model


def batch(seed: int = 1):
    """Two-segment inputs with right padding: row 0 full, row 1 padded after 9 tokens, row 2 after 5."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (3, 14), generator=g)
    lengths = [14, 9, 5]
    mask = torch.zeros(3, 14, dtype=torch.long)
    segments = torch.zeros(3, 14, dtype=torch.long)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
        segments[row, n // 2 : n] = 1
        ids[row, n:] = 0
    return ids, segments, mask


@pytest.fixture(scope="module")
def pretraining(tmp_path_factory):
    hf = make_hf(BertForPreTraining)
    directory = tmp_path_factory.mktemp("hf_bert_pretraining")
    hf.save_pretrained(directory)
    return hf, load_hf(directory)


@torch.no_grad()
def test_pretraining_matches_hf_logits(pretraining):
    """MLM logits at every non-padding position and NSP logits agree within 1e-5, padding and segments included."""
    hf, zoo = pretraining
    assert isinstance(zoo, BERT) and zoo.config.head == "pretraining" and not zoo.training
    ids, segments, mask = batch()
    expected = hf(ids, attention_mask=mask, token_type_ids=segments)
    ours = zoo(ids, attention_mask=mask, token_type_ids=segments)
    real = mask.bool()
    torch.testing.assert_close(ours.mlm_logits[real], expected.prediction_logits[real], **TOL)
    torch.testing.assert_close(ours.nsp_logits, expected.seq_relationship_logits, **TOL)
    # The segment embedding matters: the same ids with all-zero segments give other logits.
    other = zoo(ids, attention_mask=mask)
    assert (other.hidden - ours.hidden)[segments.bool()].abs().max() > 1e-2


@torch.no_grad()
def test_masked_positions_give_the_same_logits_as_all_positions(pretraining):
    """Asking only for some positions returns exactly those rows of the full projection, in row-major order."""
    _, zoo = pretraining
    ids, segments, mask = batch(seed=2)
    wanted = torch.zeros_like(mask, dtype=torch.bool)
    wanted[0, [1, 5, 13]] = True
    wanted[2, [2]] = True
    full = zoo(ids, attention_mask=mask, token_type_ids=segments).mlm_logits
    some = zoo(ids, attention_mask=mask, token_type_ids=segments, mlm_positions=wanted).mlm_logits
    assert some.shape == (4, VOCAB)
    torch.testing.assert_close(some, full[wanted], **TOL)


@torch.no_grad()
def test_sequence_classification_matches_hf(tmp_path):
    hf = make_hf(BertForSequenceClassification, seed=3, num_labels=3)
    hf.save_pretrained(tmp_path)
    zoo = load_hf(tmp_path)
    assert zoo.config.head == "classification" and zoo.config.num_labels == 3
    ids, segments, mask = batch(seed=4)
    expected = hf(ids, attention_mask=mask, token_type_ids=segments).logits
    torch.testing.assert_close(zoo(ids, attention_mask=mask, token_type_ids=segments).logits, expected, **TOL)


@torch.no_grad()
def test_bert_model_matches_hf_hidden_states_and_pooler(tmp_path):
    hf = make_hf(BertModel, seed=5)
    hf.save_pretrained(tmp_path)
    zoo = load_hf(tmp_path)
    assert zoo.config.head == "none" and zoo.mlm is None and zoo.classifier is None
    ids, segments, mask = batch(seed=6)
    expected = hf(ids, attention_mask=mask, token_type_ids=segments)
    ours = zoo(ids, attention_mask=mask, token_type_ids=segments)
    real = mask.bool()
    torch.testing.assert_close(ours.hidden[real], expected.last_hidden_state[real], **TOL)
    torch.testing.assert_close(ours.pooled, expected.pooler_output, **TOL)


@torch.no_grad()
@pytest.mark.parametrize(
    "cls, head",
    [(BertForPreTraining, "pretraining"), (BertForSequenceClassification, "classification"), (BertModel, "none")],
)
def test_save_hf_round_trip(cls, head, tmp_path):
    """save_hf writes a directory the matching HF class loads with no missing weights and equal outputs."""
    torch.manual_seed(7)
    zoo = BERT.from_preset("bert-tiny", vocab_size=VOCAB, max_position_embeddings=40, head=head).eval()
    with torch.no_grad():
        for name, param in zoo.named_parameters():
            if name.endswith("bias"):
                param.normal_(0.0, 0.1)
    save_hf(zoo, tmp_path / "out")
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["model_type"] == "bert" and config["architectures"] == [cls.__name__]
    back, info = cls.from_pretrained(tmp_path / "out", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    back.eval()
    ids, segments, mask = batch(seed=8)
    theirs = back(ids, attention_mask=mask, token_type_ids=segments)
    ours = zoo(ids, attention_mask=mask, token_type_ids=segments)
    real = mask.bool()
    if head == "pretraining":
        torch.testing.assert_close(ours.mlm_logits[real], theirs.prediction_logits[real], **TOL)
        torch.testing.assert_close(ours.nsp_logits, theirs.seq_relationship_logits, **TOL)
    elif head == "classification":
        torch.testing.assert_close(ours.logits, theirs.logits, **TOL)
    else:
        torch.testing.assert_close(ours.pooled, theirs.pooler_output, **TOL)
    again = load_hf(tmp_path / "out")
    for name, tensor in zoo.state_dict().items():
        assert torch.equal(again.state_dict()[name], tensor), name


def test_tensorflow_style_layernorm_names_load(tmp_path, pretraining):
    """Checkpoints converted from the original release call LayerNorm parameters gamma/beta."""
    hf, zoo = pretraining
    from safetensors.torch import save_file

    state = {
        k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v.clone()
        for k, v in hf.state_dict().items()
    }  # cloned: the tied decoder copies are stored too
    save_file(state, tmp_path / "model.safetensors")
    hf.config.to_json_file(tmp_path / "config.json")
    again = load_hf(tmp_path)
    for name, tensor in zoo.state_dict().items():
        assert torch.equal(again.state_dict()[name], tensor), name


def test_unsupported_bert_options_fail_by_name(tmp_path):
    hf = make_hf(BertModel, position_embedding_type="relative_key")
    hf.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="position_embedding_type 'relative_key'"):
        load_hf(tmp_path)


def test_unexpected_tensor_is_named(tmp_path, pretraining):
    hf, _ = pretraining
    from safetensors.torch import save_file

    state = {k: v.clone() for k, v in hf.state_dict().items()}
    state["bert.encoder.layer.0.attention.self.distance_embedding.weight"] = torch.zeros(3, 3)
    save_file(state, tmp_path / "model.safetensors")
    hf.config.to_json_file(tmp_path / "config.json")
    with pytest.raises(ValueError, match="distance_embedding"):
        load_hf(tmp_path)
