"""Tests of zoo.models.GPT: presets, config validation, causality, KV-cached and padded generation, sampling."""

from __future__ import annotations

import pytest
import torch

from zoo.core import KVCache
from zoo.models import GPT, GPTConfig

VOCAB, BLOCK = 101, 32
TOL = dict(atol=1e-5, rtol=1e-5)


def tiny_gpt(seed: int = 0, **overrides) -> GPT:
    torch.manual_seed(seed)
    config = dict(vocab_size=VOCAB, block_size=BLOCK, n_layer=2, n_head=4, n_embd=48) | overrides
    return GPT(GPTConfig(**config)).eval()


def prompts(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (batch, length), generator=g)


# --------------------------------------------------------------------------------------------------------------
# Presets and configuration


@pytest.mark.parametrize("name, expected", [("gpt2", 124_439_808), ("gpt2-medium", 354_823_168)])
def test_preset_parameter_counts(name, expected):
    """The GPT-2 presets have exactly the published parameter counts (output matrix tied, counted once)."""
    with torch.device("meta"):
        model = GPT.from_preset(name)
    assert model.num_parameters() == expected
    assert model.num_parameters(exclude_position_embeddings=True) == expected - 1024 * model.config.n_embd


def test_tied_output_matrix_counts_once():
    """Untying the output matrix adds exactly vocab * n_embd parameters."""
    tied, untied = tiny_gpt(), tiny_gpt(tie_weights=False)
    assert untied.num_parameters() - tied.num_parameters() == VOCAB * 48


def test_ffn_width_n_inner():
    """n_inner sets the FFN's hidden width: each extra unit adds an input row, its bias and an output column per
    layer, nothing else; None is GPT-2's 4 * n_embd, and a width of 0 is refused by name."""
    default, wider = tiny_gpt(), tiny_gpt(n_inner=4 * 48 + 10)
    assert default.blocks.layers[0].ff.fc1.out_features == 4 * 48
    assert wider.num_parameters() - default.num_parameters() == 2 * 10 * (48 + 1 + 48)
    with pytest.raises(ValueError, match="n_inner must be positive"):
        GPTConfig(vocab_size=VOCAB, n_inner=0)


def test_unknown_preset_lists_valid_presets():
    """from_preset with an unknown name raises ValueError listing every valid preset."""
    with pytest.raises(ValueError) as err:
        GPT.from_preset("gpt3")
    message = str(err.value)
    assert "gpt3" in message
    for name in GPT.preset_names():
        assert name in message


def test_unknown_override_names_the_key():
    """An unknown override key raises ValueError naming the key."""
    with pytest.raises(ValueError, match="n_embed"):
        GPT.from_preset("gpt-nano", vocab_size=VOCAB, n_embed=64)


def test_indivisible_width_names_both_fields():
    """n_embd=50 with n_head=4 raises ValueError mentioning n_embd and n_head."""
    with pytest.raises(ValueError) as err:
        GPT.from_preset("gpt-nano", vocab_size=VOCAB, n_embd=50, n_head=4)
    assert "n_embd" in str(err.value) and "n_head" in str(err.value)


@pytest.mark.parametrize(
    "bad", [dict(dropout=1.0), dict(activation="swish"), dict(attn_impl="flash"), dict(n_layer=0), dict(vocab_size=-1)]
)
def test_bad_config_values_raise(bad):
    """Invalid config values are rejected when the config is built."""
    with pytest.raises(ValueError):
        GPTConfig(**bad)


# --------------------------------------------------------------------------------------------------------------
# Forward


@torch.no_grad()
def test_gpt_is_causal():
    """Changing token t never changes the logits at positions < t, and does change position t."""
    model = tiny_gpt()
    idx = prompts(2, 16)
    base = model(idx)
    assert base.shape == (2, 16, VOCAB)
    for t in (0, 1, 5, 10, 15):
        changed = idx.clone()
        changed[:, t] = (idx[:, t] + 1 + t) % VOCAB
        out = model(changed)
        torch.testing.assert_close(out[:, :t], base[:, :t], atol=1e-6, rtol=0)
        assert (out[:, t] - base[:, t]).abs().max() > 1e-4


@torch.no_grad()
def test_tied_logits_use_token_matrix():
    """With tied weights the logits are the final hidden states times the token embedding matrix."""
    model = tiny_gpt()
    idx = prompts(1, 6)
    pos = torch.arange(6)[None]
    h = model.blocks(model.tok_emb(idx) + model.pos_emb(pos), is_causal=True)
    torch.testing.assert_close(model(idx), h @ model.tok_emb.weight.T, **TOL)


@pytest.mark.parametrize("chunks", [[1] * 10, [4, 1, 1, 1, 3]])
@torch.no_grad()
def test_cached_forward_matches_full_forward(chunks):
    """Logits of a step-by-step forward with a KVCache equal the full forward's logits."""
    model = tiny_gpt()
    idx = prompts(3, sum(chunks))
    full = model(idx)
    cache, outs, start = KVCache(model.config.n_layer), [], 0
    for n in chunks:
        outs.append(model(idx[:, start : start + n], cache=cache))
        start += n
        assert cache.length == start
    torch.testing.assert_close(torch.cat(outs, dim=1), full, **TOL)


@torch.no_grad()
def test_left_padded_forward_matches_unpadded():
    """With a left-padding attention_mask, the real positions get the logits of the unpadded prompt."""
    model = tiny_gpt()
    short = prompts(1, 5, seed=2)
    long = prompts(1, 8, seed=3)
    batch = torch.cat([long, torch.cat([torch.full((1, 3), 7), short], dim=1)])
    mask = torch.tensor([[1] * 8, [0, 0, 0] + [1] * 5])
    out = model(batch, attention_mask=mask)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[0], model(long)[0], **TOL)
    torch.testing.assert_close(out[1, 3:], model(short)[0], **TOL)


# --------------------------------------------------------------------------------------------------------------
# Generation


@pytest.mark.parametrize("batch", [1, 3])
def test_generate_with_and_without_cache_agree(batch):
    """Greedy generation gives identical tokens with use_cache=True and use_cache=False."""
    model = tiny_gpt()
    idx = prompts(batch, 5)
    cached = model.generate(idx, 12, temperature=0, use_cache=True)
    uncached = model.generate(idx, 12, temperature=0, use_cache=False)
    assert cached.shape == (batch, 17)
    assert torch.equal(cached[:, :5], idx)
    assert torch.equal(cached, uncached)


def test_greedy_generation_follows_argmax():
    """Each greedily generated token is the argmax of the model's logits on the sequence before it."""
    model = tiny_gpt()
    out = model.generate(prompts(2, 4), 6, temperature=0)
    with torch.no_grad():
        for i in range(4, 10):
            assert torch.equal(out[:, i], model(out[:, :i])[:, -1].argmax(-1))


@pytest.mark.parametrize("use_cache", [True, False])
def test_left_padded_batch_matches_individual_generation(use_cache):
    """Two left-padded prompts of different lengths continue exactly as each prompt generated alone."""
    model = tiny_gpt()
    a, b = prompts(1, 6, seed=4), prompts(1, 3, seed=5)
    alone_a = model.generate(a, 8, temperature=0, use_cache=use_cache)
    alone_b = model.generate(b, 8, temperature=0, use_cache=use_cache)
    for pad in (0, 55):
        batch = torch.cat([a, torch.cat([torch.full((1, 3), pad), b], dim=1)])
        mask = torch.tensor([[1] * 6, [0, 0, 0, 1, 1, 1]])
        out = model.generate(batch, 8, attention_mask=mask, temperature=0, use_cache=use_cache)
        assert out.shape == (2, 14)
        assert torch.equal(out[0], alone_a[0])
        assert torch.equal(out[1, 3:], alone_b[0])


@pytest.mark.parametrize("use_cache", [True, False])
def test_generation_slides_past_block_size(use_cache):
    """Generating past block_size returns prompt + max_new_tokens ids, each the argmax over the last window."""
    model = tiny_gpt()
    idx = prompts(2, 28)
    out = model.generate(idx, 10, temperature=0, use_cache=use_cache)
    assert out.shape == (2, 38)
    with torch.no_grad():
        for i in range(28, 38):
            window = out[:, max(0, i - BLOCK) : i]
            assert torch.equal(out[:, i], model(window)[:, -1].argmax(-1)), i


def test_cached_and_uncached_agree_past_block_size():
    """The cache-to-window switch at block_size gives the same tokens as never using the cache."""
    model = tiny_gpt(seed=3)
    idx = prompts(2, 20, seed=6)
    assert torch.equal(
        model.generate(idx, 20, temperature=0, use_cache=True), model.generate(idx, 20, temperature=0, use_cache=False)
    )


def test_prompt_longer_than_context_raises():
    """A prompt longer than block_size raises ValueError mentioning the context."""
    model = tiny_gpt()
    model.generate(prompts(1, BLOCK), 1, temperature=0)  # exactly block_size is fine
    with pytest.raises(ValueError, match="context"):
        model.generate(prompts(1, BLOCK + 1), 1, temperature=0)


def test_forward_beyond_context_raises():
    """A plain forward over more positions than block_size raises ValueError naming the maximum context."""
    model = tiny_gpt()
    with pytest.raises(ValueError, match="maximum context"):
        model(prompts(1, BLOCK + 1))


def test_generate_rejects_bad_arguments():
    """Empty prompts and negative max_new_tokens raise ValueError; max_new_tokens=0 returns the prompt."""
    model = tiny_gpt()
    with pytest.raises(ValueError):
        model.generate(torch.zeros(1, 0, dtype=torch.long), 3)
    with pytest.raises(ValueError):
        model.generate(prompts(1, 3), -1)
    idx = prompts(2, 3)
    assert torch.equal(model.generate(idx, 0), idx)


def test_generate_restores_training_mode():
    """generate runs in eval mode and puts a training model back into training mode."""
    model = tiny_gpt(dropout=0.1).train()
    a = model.generate(prompts(1, 4), 5, temperature=0)
    assert model.training
    b = model.generate(prompts(1, 4), 5, temperature=0)
    assert torch.equal(a, b)  # no dropout noise while generating


def test_eos_stops_generation_when_all_rows_finish():
    """When every row emits eos_token_id, generation stops early right after it."""
    model = tiny_gpt()
    idx = prompts(1, 5)
    first = int(model.generate(idx, 1, temperature=0)[0, -1])
    out = model.generate(idx, 10, temperature=0, eos_token_id=first)
    assert out.shape == (1, 6)
    assert int(out[0, -1]) == first


def test_finished_rows_keep_emitting_eos():
    """A row that emitted EOS keeps emitting it while other rows continue their normal greedy output."""
    model = tiny_gpt()
    idx = prompts(2, 5, seed=7)
    free = model.generate(idx, 8, temperature=0)
    eos = int(free[0, 5])  # row 0 emits it first
    assert eos not in free[1, 5:].tolist(), "pick prompts where row 1 never emits row 0's first token"
    out = model.generate(idx, 8, temperature=0, eos_token_id=eos)
    assert out.shape == (2, 13)  # row 1 never finishes, so no early stop
    assert (out[0, 5:] == eos).all()
    assert torch.equal(out[1], free[1])


@pytest.mark.parametrize(
    "options",
    [
        dict(temperature=0.8),
        dict(temperature=0.8, top_k=10),
        dict(temperature=1.0, top_p=0.9),
        dict(temperature=1.2, top_k=20, top_p=0.8),
    ],
)
def test_sampling_is_reproducible_with_generator(options):
    """The same torch.Generator seed gives the same sampled continuation; another seed gives another one."""
    model = tiny_gpt()
    idx = prompts(4, 4)

    def run(seed):
        return model.generate(idx, 10, generator=torch.Generator().manual_seed(seed), **options)

    assert torch.equal(run(11), run(11))
    assert not torch.equal(run(11), run(12))


def test_top_k_one_sampling_equals_greedy():
    """Sampling restricted to top_k=1 produces the greedy continuation."""
    model = tiny_gpt()
    idx = prompts(2, 4)
    sampled = model.generate(idx, 8, temperature=1.0, top_k=1, generator=torch.Generator().manual_seed(0))
    assert torch.equal(sampled, model.generate(idx, 8, temperature=0))


@pytest.mark.parametrize("tie_weights", [True, False])
def test_loss_with_targets_equals_cross_entropy_of_logits(tie_weights):
    """model.loss(idx, targets) (the fused output layer + loss) gives the loss and gradients of
    F.cross_entropy(model(idx), ...), with ignored positions."""
    targets = prompts(3, 20, seed=2)
    targets[:, -1] = -100

    def loss_and_grads(fused: bool):
        model = tiny_gpt(tie_weights=tie_weights).train()
        idx = prompts(3, 20)
        if fused:
            loss = model.loss(idx, targets)
        else:
            loss = torch.nn.functional.cross_entropy(model(idx).reshape(-1, VOCAB), targets.reshape(-1))
        loss.backward()
        return loss.detach(), {n: p.grad for n, p in model.named_parameters()}

    (fused, fused_grads), (plain, plain_grads) = loss_and_grads(True), loss_and_grads(False)
    torch.testing.assert_close(fused, plain, **TOL)
    for name, grad in plain_grads.items():
        torch.testing.assert_close(fused_grads[name], grad, **TOL, msg=name)


def test_forward_returns_logits_only_and_compile_covers_the_loss():
    """forward has one result (logits): a loss is asked of `loss`, and `compile()` compiles that method too
    (the training step calls it, so leaving it eager would silently train uncompiled)."""
    from torch._dynamo.testing import CompileCounter

    model, idx = tiny_gpt(), prompts(2, 12)
    with pytest.raises(TypeError, match="targets"):
        model(idx, targets=idx)
    eager = model.loss(idx, idx)
    counter = CompileCounter()
    model.compile(backend=counter)
    torch.testing.assert_close(model.loss(idx, idx), eager, **TOL)
    assert counter.frame_count >= 1
    compiled_frames = counter.frame_count
    assert model(idx).shape == (2, 12, VOCAB)
    assert counter.frame_count > compiled_frames  # forward compiled separately
