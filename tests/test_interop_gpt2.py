"""Tests of zoo.interop for GPT-2: parity with transformers.GPT2LMHeadModel, round trips and loading errors."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

from zoo.interop import load_hf, save_hf  # noqa: E402
from zoo.models import GPT  # noqa: E402

VOCAB = 101
TOL = dict(atol=1e-5, rtol=1e-5)


def make_hf(seed: int = 0, **overrides) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=VOCAB,
        n_positions=32,
        n_embd=48,
        n_layer=2,
        n_head=4,
        bos_token_id=VOCAB - 1,
        eos_token_id=VOCAB - 1,
        **overrides,
    )
    return GPT2LMHeadModel(config).eval()


def tokens(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB - 1, (batch, length), generator=g)  # never the eos id


@pytest.fixture(scope="module")
def hf_and_zoo(tmp_path_factory):
    hf = make_hf()
    directory = tmp_path_factory.mktemp("hf_gpt2")
    hf.save_pretrained(directory)
    return hf, load_hf(directory)


@torch.no_grad()
def test_loaded_model_matches_hf_logits(hf_and_zoo):
    """A GPT2LMHeadModel saved with save_pretrained and read by load_hf gives the same fp32 logits."""
    hf, zoo = hf_and_zoo
    assert isinstance(zoo, GPT) and not zoo.training
    assert zoo.config.vocab_size == VOCAB and zoo.config.block_size == 32 and zoo.config.n_layer == 2
    idx = tokens(2, 12)
    expected = hf(idx).logits
    torch.testing.assert_close(zoo(idx), expected, **TOL)


@torch.no_grad()
def test_loaded_model_matches_hf_with_left_padding(hf_and_zoo):
    """With a left-padded attention_mask the logits agree at every non-padding position."""
    hf, zoo = hf_and_zoo
    idx = tokens(3, 10, seed=2)
    mask = torch.ones(3, 10, dtype=torch.long)
    mask[1, :4] = 0
    mask[2, :1] = 0
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    expected = hf(idx, attention_mask=mask, position_ids=position_ids).logits
    ours = zoo(idx, attention_mask=mask)
    assert torch.isfinite(ours).all()
    real = mask.bool()
    torch.testing.assert_close(ours[real], expected[real], **TOL)


@torch.no_grad()
def test_save_hf_round_trip(hf_and_zoo, tmp_path):
    """save_hf writes a directory GPT2LMHeadModel.from_pretrained loads with the same logits and tied weights."""
    hf, zoo = hf_and_zoo
    save_hf(zoo, tmp_path / "out")
    assert (tmp_path / "out" / "config.json").is_file()
    back = GPT2LMHeadModel.from_pretrained(tmp_path / "out").eval()
    assert back.lm_head.weight.data_ptr() == back.transformer.wte.weight.data_ptr() or torch.equal(
        back.lm_head.weight, back.transformer.wte.weight
    )
    idx = tokens(2, 9, seed=3)
    torch.testing.assert_close(back(idx).logits, zoo(idx), **TOL)
    torch.testing.assert_close(back(idx).logits, hf(idx).logits, **TOL)
    # And zoo reads its own output back identically.
    again = load_hf(tmp_path / "out")
    for (name, a), (_, b) in zip(zoo.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), name


@torch.no_grad()
def test_untied_output_matrix_round_trip(tmp_path):
    """A checkpoint with tie_word_embeddings=False keeps its own lm_head through load_hf and save_hf."""
    hf = make_hf(seed=4, tie_word_embeddings=False)
    with torch.no_grad():
        hf.lm_head.weight.normal_(std=0.05)
    assert not torch.equal(hf.lm_head.weight, hf.transformer.wte.weight)
    hf.save_pretrained(tmp_path / "hf")
    zoo = load_hf(tmp_path / "hf")
    assert zoo.lm_head is not None
    idx = tokens(2, 7, seed=5)
    torch.testing.assert_close(zoo(idx), hf(idx).logits, **TOL)
    save_hf(zoo, tmp_path / "zoo")
    back = GPT2LMHeadModel.from_pretrained(tmp_path / "zoo").eval()
    torch.testing.assert_close(back(idx).logits, hf(idx).logits, **TOL)


@torch.no_grad()
def test_loads_pytorch_model_bin(tmp_path):
    """A checkpoint stored as pytorch_model.bin (plus config.json) loads with the same logits."""
    hf = make_hf(seed=6)
    directory = tmp_path / "bin"
    directory.mkdir()
    torch.save(hf.state_dict(), directory / "pytorch_model.bin")
    hf.config.to_json_file(directory / "config.json")
    assert not (directory / "model.safetensors").exists()
    zoo = load_hf(directory)
    idx = tokens(2, 8, seed=7)
    torch.testing.assert_close(zoo(idx), hf(idx).logits, **TOL)


def test_missing_config_json_raises(tmp_path):
    """A directory without config.json raises FileNotFoundError naming config.json."""
    with pytest.raises(FileNotFoundError, match=r"config\.json"):
        load_hf(tmp_path)


def test_unsupported_model_type_raises(tmp_path):
    """A config whose model_type is 'llama' raises ValueError naming the type."""
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ValueError, match="llama"):
        load_hf(tmp_path)


def test_nonexistent_directory_raises(tmp_path):
    """A path that does not exist raises FileNotFoundError."""
    with pytest.raises(FileNotFoundError):
        load_hf(tmp_path / "does-not-exist")


def test_config_without_weights_raises(tmp_path):
    """A config.json with no weight file raises FileNotFoundError naming the expected weight files."""
    make_hf().config.to_json_file(tmp_path / "config.json")
    with pytest.raises(FileNotFoundError, match=r"model\.safetensors"):
        load_hf(tmp_path)


@torch.no_grad()
def test_greedy_generation_matches_hf(hf_and_zoo):
    """zoo's greedy generate gives the same tokens as hf.generate(do_sample=False) for a short prompt."""
    hf, zoo = hf_and_zoo
    prompt = tokens(1, 5, seed=8)
    expected = hf.generate(
        prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=10, pad_token_id=0
    )
    ours = zoo.generate(prompt, 10, temperature=0)
    assert ours.shape == (1, 15)
    assert torch.equal(ours, expected)


@torch.no_grad()
@pytest.mark.parametrize("activation", ["relu", "relu2"])
def test_other_activations_round_trip(activation, tmp_path):
    """An HF GPT-2 with activation_function relu / relu2 (squared ReLU) loads into zoo and saves back with the
    same logits."""
    hf = make_hf(seed=6, activation_function=activation)
    hf.save_pretrained(tmp_path / "hf")
    zoo = load_hf(tmp_path / "hf")
    assert zoo.config.activation == activation
    idx = tokens(2, 7, seed=7)
    torch.testing.assert_close(zoo(idx), hf(idx).logits, **TOL)
    save_hf(zoo, tmp_path / "zoo")
    back = GPT2LMHeadModel.from_pretrained(tmp_path / "zoo").eval()
    torch.testing.assert_close(back(idx).logits, hf(idx).logits, **TOL)


@torch.no_grad()
def test_ffn_width_n_inner_round_trip(tmp_path):
    """An HF GPT-2 with its own n_inner (not 4 * n_embd) loads into zoo's n_inner and saves back with the same
    logits."""
    hf = make_hf(seed=8, n_inner=100)
    hf.save_pretrained(tmp_path / "hf")
    zoo = load_hf(tmp_path / "hf")
    assert zoo.config.n_inner == 100
    idx = tokens(2, 7, seed=9)
    torch.testing.assert_close(zoo(idx), hf(idx).logits, **TOL)
    save_hf(zoo, tmp_path / "zoo")
    back = GPT2LMHeadModel.from_pretrained(tmp_path / "zoo").eval()
    assert back.config.n_inner == 100
    torch.testing.assert_close(back(idx).logits, hf(idx).logits, **TOL)
