"""Count n-gram language models: the loss an arm of a language-model question must beat before its val loss says
anything about the claim. Orders 1..n, fitted on the training split's tokens, scored in mean nats per token.

Order 1 alone is the maximum-likelihood unigram (discounted toward uniform only when a token never occurs). Orders 2
and up are interpolated Kneser-Ney (Chen and Goodman 1999, section 3): p_k(w | h) = max(c(h w) - D_k, 0) / c(h) +
D_k N1+(h .) / c(h) p_(k-1)(w | h'), D_k = n1 / (n1 + 2 n2), p_0 uniform; the lower levels count continuations.
`method="absolute"` keeps raw counts at every level. k-grams are integers in base vocab_size (np.unique counts them,
a sorted search looks them up); an order whose k-grams do not fit in 63 bits is refused.

`covered_windows` gives exactly the windows the lab's `val/loss` covers; each window's tokens are predicted from the
same window only, as the Transformer sees them. `score(..., windows=None)` scores the whole split as one stream."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

METHODS = ("kneser_ney", "absolute")
DEFAULT_METHOD = "kneser_ney"
MAX_ORDER = 4
_NAMES = {1: "unigram", 2: "bigram", 3: "trigram"}


def order_name(order: int) -> str:
    return _NAMES.get(order, f"{order}-gram")


def ngram_codes(tokens: np.ndarray, order: int, vocab_size: int) -> np.ndarray:
    """Entry i is tokens[i : i + order] read in base vocab_size, the oldest token the most significant digit."""
    check_fits(order, vocab_size)
    t = np.asarray(tokens, dtype=np.int64)
    n = len(t) - order + 1
    codes = np.zeros(max(n, 0), dtype=np.int64)
    for j in range(order):
        codes = codes * vocab_size + t[j : j + n] if n > 0 else codes
    return codes


def check_fits(order: int, vocab_size: int) -> None:
    if vocab_size**order >= 2**63:
        raise ValueError(
            f"{order}-grams over a vocabulary of {vocab_size} do not fit in 63 bits; use a lower order (or char tokens)"
        )


def ney_discount(counts: np.ndarray) -> float:
    """D = n1 / (n1 + 2 n2), n_r the number of k-grams seen exactly r times; 0.5 without either."""
    n1, n2 = int(np.sum(counts == 1)), int(np.sum(counts == 2))
    return n1 / (n1 + 2 * n2) if n1 and n2 else 0.5


@dataclass(frozen=True)
class Level:
    """One order: sorted k-gram codes with their counts, per context its total and its distinct followers."""

    keys: np.ndarray
    counts: np.ndarray
    contexts: np.ndarray
    context_totals: np.ndarray
    context_types: np.ndarray
    discount: float

    @classmethod
    def of(cls, keys: np.ndarray, counts: np.ndarray, vocab_size: int, discount: float) -> Level:
        contexts, inverse, types = np.unique(keys // vocab_size, return_inverse=True, return_counts=True)
        totals = np.bincount(inverse, weights=counts, minlength=len(contexts))
        return cls(keys, counts.astype(np.float64), contexts, totals, types.astype(np.float64), discount)


@dataclass(frozen=True)
class NgramModel:
    order: int
    vocab_size: int
    method: str
    levels: tuple[Level, ...]  # orders 1..order


def fit(train: np.ndarray, order: int, vocab_size: int, method: str = DEFAULT_METHOD) -> NgramModel:
    """An interpolated n-gram model of `order` fitted on the token array `train`."""
    check_fits(order, vocab_size)
    raw = {k: np.unique(ngram_codes(train, k, vocab_size), return_counts=True) for k in range(1, order + 1)}
    levels = []
    for k in range(1, order + 1):
        keys, counts = raw[k]
        if k < order and method == "kneser_ney":
            # continuation counts: how many distinct tokens precede the k-gram (the (k+1)-grams that end with it)
            keys, counts = np.unique(raw[k + 1][0] % vocab_size**k, return_counts=True)
        if k == order == 1:  # the unigram alone: maximum likelihood, discounted only to cover unseen tokens
            discount = 0.0 if len(keys) == vocab_size else ney_discount(counts)
        else:
            discount = ney_discount(counts)
        levels.append(Level.of(keys, counts, vocab_size, discount))
    return NgramModel(order, vocab_size, method, tuple(levels))


def _lookup(keys: np.ndarray, values: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """values[keys == query] for each query, 0 where absent (keys sorted)."""
    if len(keys) == 0:
        return np.zeros(len(queries))
    at = np.minimum(np.searchsorted(keys, queries), len(keys) - 1)
    return np.where(keys[at] == queries, values[at], 0.0)


def log_probs(model: NgramModel, tokens: np.ndarray, targets: np.ndarray, history: np.ndarray) -> np.ndarray:
    """ln p(tokens[i] | the history[i] tokens before it) for each index i of `targets` (level k where history >=
    k - 1)."""
    t = np.asarray(tokens, dtype=np.int64)
    targets, history = np.asarray(targets, dtype=np.int64), np.asarray(history, dtype=np.int64)
    v = model.vocab_size
    p = np.full(len(targets), 1.0 / v)  # level 0: uniform
    for k, level in enumerate(model.levels, start=1):
        code = np.zeros(len(targets), dtype=np.int64)
        for j in range(k):  # the k-gram ending at each target (clamped at the array's start; masked below)
            code = code * v + t[np.maximum(targets - (k - 1) + j, 0)]
        context = code // v
        count = _lookup(level.keys, level.counts, code)
        total = _lookup(level.contexts, level.context_totals, context)
        types = _lookup(level.contexts, level.context_types, context)
        seen = total > 0
        safe = np.where(seen, total, 1.0)
        d = level.discount
        interpolated = np.maximum(count - d, 0.0) / safe + d * types / safe * p
        p = np.where(seen & (history >= k - 1), interpolated, p)
    return np.log(p)


@dataclass(frozen=True)
class Windows:
    """Disjoint windows of `block_size` tokens starting at `starts`: inputs t[s : s + B], targets t[s+1 : s+B+1]."""

    starts: np.ndarray
    block_size: int
    description: str  # in words, for the report

    def targets(self) -> tuple[np.ndarray, np.ndarray]:
        """(index of each target token, how many tokens of its window precede it)."""
        offsets = np.arange(self.block_size, dtype=np.int64)
        targets = (np.asarray(self.starts, dtype=np.int64)[:, None] + 1 + offsets[None, :]).ravel()
        history = np.broadcast_to(offsets + 1, (len(self.starts), self.block_size)).ravel()
        return targets, history


def covered_windows(dataset, batch_size: int, limit_val_batches=None) -> Windows:
    """The validation dataset's windows (zoo.data.windows.DisjointWindows) in batches of `batch_size`, cut at
    `limit_val_batches` as Lightning cuts them (an int: batches; a float up to 1.0: a fraction; None: all)."""
    count, batches = len(dataset.starts), math.ceil(len(dataset.starts) / batch_size)
    if limit_val_batches is None:
        limit = batches
    elif isinstance(limit_val_batches, float) and limit_val_batches <= 1.0:
        limit = int(batches * limit_val_batches)
    else:
        limit = int(limit_val_batches)
    covered = min(count, max(limit, 1) * batch_size)
    what = f"the {covered} validation windows of {dataset.block_size} tokens the val loss covers"
    if covered < count:
        what += f" (of {count})"
    return Windows(np.asarray(dataset.starts[:covered]), dataset.block_size, what)


def score(model: NgramModel, val: np.ndarray, windows: Windows | None = None) -> float:
    """Mean nats per predicted token over `windows`, or over the whole split as one stream."""
    if windows is None:
        targets = np.arange(1, len(val), dtype=np.int64)
        history = targets
    else:
        targets, history = windows.targets()
    return float(-log_probs(model, val, targets, history).mean())


@dataclass(frozen=True)
class Baselines:
    """The n-gram losses of one dataset: order -> mean nats per predicted token, and what was scored (in words)."""

    losses: dict[int, float]
    method: str
    scored: str


def baselines(
    train: np.ndarray,
    val: np.ndarray,
    vocab_size: int,
    orders: int = MAX_ORDER,
    method: str = DEFAULT_METHOD,
    windows: Windows | None = None,
) -> Baselines:
    """Orders 1..`orders`, each fitted on `train` and scored on `val` (the windows, else the whole split)."""
    check_fits(orders, vocab_size)  # before fitting anything
    losses = {n: score(fit(train, n, vocab_size, method), val, windows) for n in range(1, orders + 1)}
    scored = f"the whole validation split ({len(val) - 1} predicted tokens)" if windows is None else windows.description
    return Baselines(losses, method, scored)


def _main() -> None:
    """python -m zoo.lab.decide.baselines: tiny shakespeare's numbers, whole split and the lab's windows."""
    import argparse

    from zoo.data import LanguageModelDataModule
    from zoo.data.windows import DisjointWindows

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="tinyshakespeare")
    parser.add_argument("--tokenizer", default="char")
    parser.add_argument("--orders", type=int, default=MAX_ORDER)
    args = parser.parse_args()
    data = LanguageModelDataModule(dataset=args.dataset, tokenizer=args.tokenizer, download=False)
    data.build_splits()
    train, val = np.asarray(data.tokens("train")), np.asarray(data.tokens("val"))
    print(f"{args.dataset} ({args.tokenizer}): train {len(train)} tokens, val {len(val)}, vocab {data.vocab_size}")
    # lab/common/char_lm.yaml: windows of 64, batches of 12, 20 validation batches
    lab_windows = covered_windows(DisjointWindows(val, 64, seed=0), batch_size=12, limit_val_batches=20)
    for method in METHODS:
        for windows in (None, lab_windows):
            result = baselines(train, val, data.vocab_size, args.orders, method, windows)
            losses = ", ".join(f"{order_name(n)} {v:.4f}" for n, v in result.losses.items())
            print(f"{method}, {result.scored}: {losses}")


if __name__ == "__main__":
    _main()
