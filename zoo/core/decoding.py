"""Autoregressive decoding loops shared by the models: token-by-token generation (greedy or sampled) and beam search.

Both loops know nothing about a model. They call `next_logits(generated)`, where `generated` is the (rows, t)
tensor of tokens chosen so far (t = 0 at the first step), and get back the (rows, vocab) logits of the next
position. The caller's closure owns the model, its KV cache and its inputs (a GPT prompt, a Transformer's encoder
output), so the same loops serve decoder-only continuation and encoder-decoder translation.

Processes that decode together step in lockstep when they pass `any_running`: a model sharded over them (FSDP)
gathers each block's weights from all of them at every step, so each must call `next_logits` as often as the others
even when its own inputs are done sooner. `any_running(running)` is called once before every step with whether this
process still decodes and returns whether any process does (an all-reduce, zoo.strategies.fsdp.lockstep); a process
that is done keeps stepping, its result fixed, until none runs. The result is the one decoded without it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .sampling import sample_next_token

NextLogits = Callable[[torch.Tensor], torch.Tensor]
AnyRunning = Callable[[bool], bool]


@torch.no_grad()
def decode_tokens(
    next_logits: NextLogits,
    max_new_tokens: int,
    *,
    batch_size: int,
    device: torch.device | str,
    eos_token_id: int | None = None,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    any_running: AnyRunning | None = None,
) -> torch.Tensor:
    """Choose one token per row and step; returns the (batch, n) new tokens, n <= max_new_tokens.

    temperature=0 is greedy. A row that has produced `eos_token_id` keeps emitting it; the loop stops early once
    every row has (so n < max_new_tokens only when all rows ended with EOS). any_running: step in lockstep with
    other processes (the module's docstring).
    """
    generated = torch.empty(batch_size, 0, dtype=torch.long, device=device)
    finished = torch.zeros(batch_size, dtype=torch.bool, device=device)
    kept: int | None = None  # the steps of this process's result, once it is done
    while True:
        running = generated.shape[1] < max_new_tokens and not (eos_token_id is not None and bool(finished.all()))
        if not running and kept is None:
            kept = generated.shape[1]
        if not (running if any_running is None else any_running(running)):
            break
        # Past this process's own end (another process still decodes) the steps only keep the lockstep: finished
        # rows go on emitting EOS and the columns beyond `kept` are dropped.
        logits = next_logits(generated)
        nxt = sample_next_token(logits, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator)
        if eos_token_id is not None:
            nxt = torch.where(finished, torch.full_like(nxt, eos_token_id), nxt)
            finished |= nxt == eos_token_id
        generated = torch.cat([generated, nxt[:, None]], dim=1)
    return generated[:, :kept]


def length_penalty_factor(length: int, alpha: float) -> float:
    """GNMT's length penalty lp(Y) = ((5 + |Y|) / 6) ** alpha (Wu et al. 2016), used by "Attention Is All You
    Need" with alpha 0.6. Scores are divided by it; alpha 0 ranks by the plain sum of log-probabilities."""
    return ((5.0 + length) / 6.0) ** alpha


@torch.no_grad()
def beam_search(
    next_logits: NextLogits,
    max_new_tokens: int,
    *,
    batch_size: int,
    beam_size: int,
    eos_token_id: int,
    pad_token_id: int,
    device: torch.device | str,
    length_penalty: float = 0.0,
    reorder: Callable[[torch.Tensor], None] | None = None,
    any_running: AnyRunning | None = None,
) -> torch.Tensor:
    """Beam search over `batch_size` independent inputs; returns (batch, n) tokens of each input's best
    hypothesis, ending with EOS unless it reached max_new_tokens, right-padded with `pad_token_id`.

    `next_logits` sees batch_size * beam_size rows, input b's beams in rows b*K .. b*K+K-1 (the caller repeats its
    inputs that way). After each step the surviving beams are picked by `reorder(index)`: row i of the next step
    continues row index[i] of this one, so the caller reorders its KV cache with it.

    As in fairseq: each step ranks the 2K best extensions of the K live beams by summed log-probability; an
    extension by EOS among the top K ends a hypothesis, scored by sum / lp(length) (`length_penalty_factor`);
    the first K extensions that do not end continue. An input is done when it has K ended hypotheses; at
    max_new_tokens its live beams end as they are. With K = 1 this is exactly greedy decoding. any_running: step
    in lockstep with other processes (the module's docstring).
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    if length_penalty < 0:
        raise ValueError(f"length_penalty must be >= 0, got {length_penalty}")
    b_size, k = batch_size, beam_size
    neg_inf = float("-inf")
    generated = torch.empty(b_size * k, 0, dtype=torch.long, device=device)
    # Every beam starts identical; only the first may expand at step 0, or the beam would hold K copies.
    scores = torch.full((b_size, k), neg_inf, device=device)
    scores[:, 0] = 0.0
    ended: list[list[tuple[float, list[int]]]] = [[] for _ in range(b_size)]
    done = [False] * b_size
    row_base = (torch.arange(b_size, device=device) * k)[:, None]
    step = 0
    while True:
        if step >= max_new_tokens and not all(done):
            _end_live_beams(ended, done, generated, scores, k, length_penalty)
        running = not all(done)
        if not (running if any_running is None else any_running(running)):
            break
        # Once every input is done (another process still decodes) the steps only keep the lockstep: no hypothesis
        # is added to a done input.
        logits = next_logits(generated).float()
        vocab = logits.shape[-1]
        candidates = scores[:, :, None] + logits.log_softmax(dim=-1).view(b_size, k, vocab)
        top_scores, top_index = candidates.view(b_size, k * vocab).topk(min(2 * k, k * vocab), dim=1)
        top_beam, top_token = top_index // vocab, top_index % vocab
        is_eos = top_token == eos_token_id
        _collect_ended(ended, done, generated, top_scores, top_beam, is_eos, k, step + 1, length_penalty, eos_token_id)
        # The K best extensions that do not end continue (ranked order is kept by topk over the masked scores).
        live_scores, pick = top_scores.masked_fill(is_eos, neg_inf).topk(k, dim=1)
        index = (row_base + top_beam.gather(1, pick)).view(-1)
        generated = torch.cat([generated.index_select(0, index), top_token.gather(1, pick).view(-1, 1)], dim=1)
        scores = live_scores
        if reorder is not None:
            reorder(index)
        step += 1
    return _best(ended, pad_token_id, device)


def _collect_ended(ended, done, generated, top_scores, top_beam, is_eos, k, length, alpha, eos) -> None:
    penalty = length_penalty_factor(length, alpha)
    rows = is_eos[:, :k].nonzero().tolist()  # only EOS among the top K candidates ends a hypothesis
    for b, j in rows:
        score = float(top_scores[b, j])
        if done[b] or score == float("-inf"):
            continue
        tokens = generated[b * k + int(top_beam[b, j])].tolist() + [eos]
        ended[b].append((score / penalty, tokens))
        if len(ended[b]) >= k:
            done[b] = True


def _end_live_beams(ended, done, generated, scores, k, alpha) -> None:
    """At the length limit: the live beams of every input not done end as they are, and every input is done."""
    penalty = length_penalty_factor(generated.shape[1], alpha)
    for b in range(len(ended)):
        if done[b]:
            continue
        done[b] = True
        for j in range(k):
            score = float(scores[b, j])
            if score != float("-inf"):
                ended[b].append((score / penalty, generated[b * k + j].tolist()))


def _best(ended, pad_token_id: int, device) -> torch.Tensor:
    # max() keeps the first of equal scores: the earlier-ended (or higher-ranked) hypothesis, deterministically.
    best = [max(hyps, key=lambda h: h[0])[1] if hyps else [] for hyps in ended]
    width = max((len(t) for t in best), default=0)
    out = torch.full((len(best), width), pad_token_id, dtype=torch.long, device=device)
    for i, tokens in enumerate(best):
        out[i, : len(tokens)] = torch.tensor(tokens, dtype=torch.long, device=device)
    return out
