"""What a lab arm must beat: the count n-gram models of zoo/lab/decide/baselines.py (their losses on tiny shakespeare,
the closed form of the unigram, proper distributions, the windows the val loss covers), the reference of a question
(zoo/lab/decide/reference.py) in the report (an arm at the unigram level did not learn: its claim checks are
inconclusive, sanity checks and probes read at init are not), readable metric names, the per-seed CSV, and the summary
of docs/lab.md generated from the published sections.

Sweeps are made by hand in tmp_path as a lab multirun leaves them (no training), with a data section in the jobs'
config_resolved.yaml so that the report computes the n-gram models of tiny shakespeare (which always resolves)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from zoo.data import LanguageModelDataModule
from zoo.data.windows import DisjointWindows
from zoo.lab.decide import baselines
from zoo.lab.decide.baselines import covered_windows, fit, log_probs, ngram_codes, score
from zoo.lab.decide.claims import check_config
from zoo.lab.decide.metric_names import describe, header
from zoo.lab.decide.reference import reference_config
from zoo.lab.report.page import SUMMARY_BEGIN, SUMMARY_END, load_results, render, summary_row
from zoo.lab.report.publish import publish, write_page
from zoo.lab.report.report import DECISION_JSON, PER_SEED_CSV, write_report

SEEDS = ["1", "2", "3", "4", "5"]
CHAR_DATA = {
    "_target_": "zoo.data.LanguageModelDataModule",
    "dataset": "tinyshakespeare",
    "tokenizer": "char",
    "block_size": 64,
    "batch_size": 12,
    "val_fraction": 0.1,
    "data_dir": None,  # ZOO_DATA_DIR and ZOO_CACHE_DIR of the test session
    "cache_dir": None,
}
TRAINER = {"limit_val_batches": 20, "accumulate_grad_batches": 1, "devices": 1}


@pytest.fixture(scope="module")
def shakespeare() -> tuple[np.ndarray, np.ndarray, int]:
    """tiny shakespeare's char train and val token arrays as the LM data module splits them (90/10 by position)."""
    data = LanguageModelDataModule(dataset="tinyshakespeare", tokenizer="char")
    data.build_splits()
    return np.asarray(data.tokens("train")), np.asarray(data.tokens("val")), data.vocab_size


# ---- the n-gram models -------------------------------------------------------------------------------------------


def test_tiny_shakespeare_ngram_losses_fall_with_the_order_and_match_the_reviewers(shakespeare):
    train, val, vocab = shakespeare
    result = baselines.baselines(train, val, vocab, orders=4)
    losses = [result.losses[n] for n in (1, 2, 3, 4)]
    assert all(a > b for a, b in zip(losses, losses[1:])), losses
    # the reviewers' numbers (absolute discounting): 3.35, 2.49, 2.06, 1.79; Kneser-Ney is a little lower above 2
    assert losses[0] == pytest.approx(3.35, abs=0.02)
    assert 2.40 < losses[1] < 2.52 and 1.98 < losses[2] < 2.10 and 1.65 < losses[3] < 1.82
    absolute = baselines.baselines(train, val, vocab, orders=4, method="absolute")
    assert absolute.losses[3] == pytest.approx(2.06, abs=0.02) and absolute.losses[4] == pytest.approx(1.79, abs=0.02)


def test_the_unigram_is_the_cross_entropy_of_val_under_the_train_frequencies(shakespeare):
    train, val, vocab = shakespeare
    frequencies = np.bincount(train, minlength=vocab) / len(train)
    predicted = np.bincount(val[1:], minlength=vocab) / (len(val) - 1)  # every val token after the first
    seen = predicted > 0
    closed_form = -float(np.sum(predicted[seen] * np.log(frequencies[seen])))
    assert score(fit(train, 1, vocab), val) == pytest.approx(closed_form, abs=1e-6)


def test_every_val_token_has_a_finite_loss_even_one_never_seen_in_training(shakespeare):
    train, val, vocab = shakespeare
    targets = np.arange(1, len(val))
    for order in (1, 2, 3, 4):
        assert np.isfinite(log_probs(fit(train, order, vocab), val, targets, targets)).all()
    # token 3 never occurs in training: the smoothed models still give it a probability
    small_train, small_val = np.array([0, 1, 2, 0, 1, 2, 0, 1, 1, 2]), np.array([0, 3, 1, 2, 3, 3])
    idx = np.arange(1, len(small_val))
    for order in (1, 2, 3, 4):
        for method in baselines.METHODS:
            assert np.isfinite(log_probs(fit(small_train, order, 4, method), small_val, idx, idx)).all()


@pytest.mark.parametrize("method", baselines.METHODS)
def test_each_order_is_a_probability_distribution_over_the_vocabulary(method):
    rng = np.random.default_rng(0)
    vocab = 6
    train = rng.choice(vocab, size=3000, p=[0.4, 0.2, 0.15, 0.1, 0.1, 0.05])
    for order in (1, 2, 3, 4):
        model = fit(train, order, vocab, method)
        for history in ([0, 1, 2], [5, 5, 5], [3, 0, 4], [1, 1]):  # seen and unseen contexts
            rows = np.array([[*history, w] for w in range(vocab)])
            flat = rows.ravel()
            targets = np.arange(len(history), len(flat), len(history) + 1)
            total = np.exp(log_probs(model, flat, targets, np.full(vocab, len(history)))).sum()
            assert total == pytest.approx(1.0, abs=1e-9), (order, history, total)


def test_ngram_codes_read_the_tokens_in_base_vocab():
    assert ngram_codes(np.array([1, 2, 3, 0]), 3, 10).tolist() == [123, 230]
    with pytest.raises(ValueError, match="63 bits"):
        ngram_codes(np.array([1, 2]), 5, 2**16)


def test_the_windows_are_those_the_val_loss_covers(shakespeare):
    _, val, _ = shakespeare
    dataset = DisjointWindows(val, 64, seed=0)  # what LanguageModelDataModule.eval_dataset("val") serves
    windows = covered_windows(dataset, batch_size=12, limit_val_batches=20)
    assert len(windows.starts) == 240 and "240 validation windows of 64 tokens" in windows.description
    targets, history = windows.targets()
    expected = np.concatenate([dataset[i][1].numpy() for i in range(240)])
    assert (val[targets] == expected).all() and history[:3].tolist() == [1, 2, 3] and history.max() == 64
    assert len(covered_windows(dataset, 12, 1.0).starts) == len(dataset)  # a fraction: Lightning's rule
    assert len(covered_windows(dataset, 12, 0.5).starts) == (len(dataset) // 12 + 1) // 2 * 12


# ---- metric names in words ---------------------------------------------------------------------------------------


def test_metric_names_in_words_with_the_raw_key_once():
    assert describe("probe/attn/logit_var/mean@init") == "variance of the attention logits at init (mean over layers)"
    assert describe("probe/grad_group/attn.q@init") == "gradient norm of W_q at init"
    assert describe("lab/loss_beyond@4x").startswith("validation loss at 4x the training length")
    assert describe("some/unknown") == "some/unknown"
    lab = {"metric_names": {"val/loss": "val loss (nats per character)"}}
    assert header("val/loss", lab) == "val loss (nats per character) (`val/loss`)"


# ---- the reference in the report, names in its table, the per-seed CSV -------------------------------------------


def make_sweep(root: Path, values: dict[str, list[float]], checks: list[dict], lab: dict | None = None) -> Path:
    """A char-LM sweep of points p (5 seeds each): val/loss per seed, a probe at init, the data of tiny shakespeare."""
    lab = {
        "name": "handmade",
        "title": "hand-made",
        "claim": "a is less than b",
        "mode": "full",
        "table": ["val/loss"],
        "plots": [{"y": "val/loss", "x": "p"}],
        "checks": checks,
        "reference": {"kind": "ngram", "metric": "val/loss", "learned_below": 3},
        **(lab or {}),
    }
    job = 0
    for point, losses in values.items():
        for seed, loss in zip(SEEDS, losses):
            folder = root / str(job)
            (folder / ".hydra").mkdir(parents=True)
            overrides = [f"p={point}", f"seed={seed}"]
            OmegaConf.save(OmegaConf.create(overrides), folder / ".hydra" / "overrides.yaml")
            config = {"lab": lab, "data": {**CHAR_DATA, "seed": int(seed)}, "trainer": TRAINER}
            OmegaConf.save(OmegaConf.create(config), folder / "config_resolved.yaml")
            metrics = {"val/loss": loss, "probe/grad/first_over_last@init": 1.0 + 0.1 * job + (point == "a")}
            record = {"metric": "val/loss", "value": loss, "overrides": overrides, "metrics": metrics}
            (folder / "result.json").write_text(json.dumps(record))
            job += 1
    return root


def spread(mean: float) -> list[float]:
    return [mean + d for d in (-0.004, 0.002, 0.0, 0.003, -0.001)]


CHECKS = [
    {"name": "b beats a", "metric": "val/loss", "expect": "less", "points": [{"p": "b"}, {"p": "a"}]},
    {"name": "b beats c", "metric": "val/loss", "expect": "less", "points": [{"p": "b"}, {"p": "c"}]},
    {
        "name": "a's gradient ratio at init is larger",
        "metric": "probe/grad/first_over_last@init",
        "expect": "greater",
        "points": [{"p": "a"}, {"p": "b"}],
        "smallest_effect": 0.0,
    },
    {
        "name": "a is worse (sanity)",
        "metric": "val/loss",
        "expect": "greater",
        "kind": "sanity",
        "points": [{"p": "a"}, {"p": "b"}],
    },
]


def test_an_arm_at_the_unigram_level_did_not_learn_and_its_claim_checks_are_inconclusive(tmp_path):
    sweep = make_sweep(tmp_path / "sweep", {"a": spread(3.33), "b": spread(1.90), "c": spread(1.95)}, CHECKS)
    path, outcome, plots = write_report(sweep)
    text = path.read_text()
    lines = text.splitlines()
    claims = {line.split("**")[1]: line for line in lines if line.startswith("- **")}
    # the arm at the unigram level: marked in the table, and its claim check inconclusive with the reason
    row_a = next(line for line in lines if line.startswith("| a |"))
    assert "did not learn (loss 3.33 ≥ trigram 2.0" in row_a
    assert "beats the trigram" in next(line for line in lines if line.startswith("| b |"))
    assert "inconclusive. p=a did not learn (loss 3.33 ≥ trigram" in claims["b beats a"]
    # two arms below the trigram are decided as before; a probe read at init is not about learning
    assert "supported" in claims["b beats c"].split(".")[0]
    assert "supported" in claims["a's gradient ratio at init is larger"].split(".")[0]
    assert "supported" in claims["a is worse (sanity)"].split(".")[0]  # sanity checks are unaffected
    # the reference line under the table's heading: every order, and what was scored
    reference = next(line for line in lines if line.startswith("**Reference** for val/loss: "))
    assert "interpolated Kneser-Ney" in reference and "240 validation windows of 64 tokens" in reference
    shown = reference.split(": ", 1)[1].split(". ", 1)[0]
    values = dict(part.rsplit(" ", 1) for part in shown.split(", "))
    assert list(values) == ["unigram", "bigram", "trigram", "4-gram"]
    assert float(values["unigram"]) > float(values["trigram"]) > float(values["4-gram"])
    assert outcome == "supported in part" and plots and plots[0].is_file()
    stamp = json.loads((path.parent / DECISION_JSON).read_text())
    assert stamp["did_not_learn"] == ["p=a"] and stamp["seeds"] == [5, 5] and stamp["outcome"] == outcome


def test_an_arm_the_claim_says_fails_may_not_learn_but_the_arm_it_is_compared_with_must(tmp_path):
    # "a trains worse than b": a at the unigram level is what the claim predicts, so the check is decided; the same
    # check against c, which did not learn either, stays inconclusive (nothing learned to be worse than)
    predicted = {"metric": "val/loss", "expect": "greater", "may_not_learn": [0]}
    checks = [
        {"name": "a worse than b", **predicted, "points": [{"p": "a"}, {"p": "b"}]},
        {"name": "a worse than c", **predicted, "points": [{"p": "a"}, {"p": "c"}]},
        {
            "name": "a worse than b, unspared",
            "metric": "val/loss",
            "expect": "greater",
            "points": [{"p": "a"}, {"p": "b"}],
        },
    ]
    sweep = make_sweep(tmp_path / "sweep", {"a": spread(3.33), "b": spread(1.90), "c": spread(2.9)}, checks)
    lines = write_report(sweep)[0].read_text().splitlines()
    claims = {line.split("**")[1]: line for line in lines if line.startswith("- **")}
    assert claims["a worse than b"].startswith("- **a worse than b**: supported.")
    assert "p=a did not learn (loss 3.33 ≥ trigram" in claims["a worse than b"]
    assert "), as the claim predicts (p(support)" in claims["a worse than b"]
    assert "inconclusive. p=c did not learn" in claims["a worse than c"]
    assert "inconclusive. p=a did not learn" in claims["a worse than b, unspared"]


@pytest.mark.parametrize(
    "spared, words",
    [
        ([0, 1], "lists every point"),
        ([2], "indices of the check's points"),
        ("0", "indices of the check's points"),
        ([True], "indices of the check's points"),  # YAML's true is not the index 1
    ],
)
def test_may_not_learn_refuses_a_bad_list(spared, words):
    check = {"name": "x", "metric": "val/loss", "expect": "greater", "points": [{"p": "a"}, {"p": "b"}]}
    with pytest.raises(ValueError, match=words):
        check_config({**check, "may_not_learn": spared}, 0)
    with pytest.raises(ValueError, match="for claim checks"):
        check_config({**check, "kind": "sanity", "may_not_learn": [0]}, 0)


def test_without_a_reference_nothing_is_marked(tmp_path):
    values = {"a": spread(3.33), "b": spread(1.90), "c": spread(1.95)}
    sweep = make_sweep(tmp_path / "sweep", values, CHECKS, {"reference": None})
    text = write_report(sweep)[0].read_text()
    assert "did not learn" not in text and "Reference**" not in text and "vs reference" not in text


def test_a_chance_reference_marks_an_arm_at_chance(tmp_path):
    checks = [{"name": "b beats a", "metric": "val/acc", "expect": "greater", "points": [{"p": "b"}, {"p": "a"}]}]
    lab = {"reference": {"kind": "chance", "metric": "val/acc", "num_classes": 10}, "table": ["val/acc"]}
    sweep = make_sweep(tmp_path / "sweep", {"a": spread(0.45), "b": spread(0.9)}, checks, lab)
    for folder in sweep.iterdir():  # accuracies: a near 0.09 (below chance), b near 0.9
        record = json.loads((folder / "result.json").read_text())
        record["metrics"]["val/acc"] = record["value"] / 5 if "p=a" in record["overrides"] else record["value"]
        (folder / "result.json").write_text(json.dumps(record))
    text = write_report(sweep)[0].read_text()
    assert "**Reference** for val/acc: chance 0.1. Chance: 1/10 classes." in text
    assert "inconclusive. p=a did not learn (validation accuracy 0.09 ≤ chance 0.1)" in text
    assert "| b | 5 | " in text and "beats chance" in text


def test_a_bad_reference_is_a_one_line_error(tmp_path):
    with pytest.raises(ValueError, match="learned_below"):
        reference_config({"reference": {"kind": "ngram", "metric": "val/loss", "learned_below": 5}})
    with pytest.raises(ValueError, match="kind"):
        reference_config({"reference": {"kind": "oracle", "metric": "val/loss"}})
    with pytest.raises(ValueError, match="exempt"):
        reference_config({"reference": {"kind": "ngram", "metric": "val/loss", "exempt": "*@init"}})
    with pytest.raises(ValueError, match="lower or higher"):
        reference_config({"reference": {"kind": "value", "metric": "probe/x", "value": 1.0}})
    assert reference_config({"reference": None}) is None


def test_a_reference_that_cannot_be_computed_is_said_and_decides_nothing(tmp_path):
    sweep = make_sweep(tmp_path / "sweep", {"a": spread(3.33), "b": spread(1.90), "c": spread(1.95)}, CHECKS)
    for config in sweep.glob("*/config_resolved.yaml"):  # 12-grams of 65 characters do not fit in 63 bits
        saved = OmegaConf.load(config)
        saved.lab.reference.orders = 12
        OmegaConf.save(saved, config)
    text = write_report(sweep)[0].read_text()
    assert "Reference for val/loss not computed: 12-grams over a vocabulary of 65 do not fit in 63 bits" in text
    assert "did not learn" not in text and "**b beats a**: supported" in text


def test_the_table_names_metrics_in_words_and_the_per_seed_csv_has_every_job(tmp_path):
    lab = {"metric_names": {"val/loss": "val loss in nats per character"}, "reference": None}
    sweep = make_sweep(tmp_path / "sweep", {"a": spread(2.0), "b": spread(1.9)}, CHECKS[:1], lab)
    text = write_report(sweep)[0].read_text()
    assert "| p | seeds | val loss in nats per character (`val/loss`) |" in text
    assert f"[{PER_SEED_CSV}]({PER_SEED_CSV})" in text
    with (sweep / PER_SEED_CSV).open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 10 and {r["seed"] for r in rows} == set(SEEDS)
    assert [float(r["val/loss"]) for r in rows if r["p"] == "b"] == pytest.approx(spread(1.9))


# ---- the summary of docs/lab.md ----------------------------------------------------------------------------------


def test_the_summary_lists_every_question_from_its_result_and_rendering_again_changes_nothing(tmp_path):
    docs = tmp_path / "docs" / "lab.md"
    docs.parent.mkdir()
    pending = "<!-- measured:pending -->\nNot run yet.\n<!-- /measured:pending -->\n"
    docs.write_text(
        f"# Lab\n\n{SUMMARY_BEGIN}\n{SUMMARY_END}\n\n## How\n\n<!-- measured:handmade -->\nPending.\n"
        "<!-- /measured:handmade -->\n\n" + pending
    )
    sweep = make_sweep(tmp_path / "sweep", {"a": spread(3.33), "b": spread(1.90), "c": spread(1.95)}, CHECKS)
    publish(sweep, docs)  # writes docs/lab/handmade/result.json and renders the page
    results = load_results(docs.parent / "lab")
    assert list(results) == ["handmade"]
    row = summary_row("handmade", results)
    assert row["outcome"] == "supported in part" and row["seeds"] == "5"
    assert row["did not learn"].startswith("1 of 3 (val/loss ≥ trigram 2.0") and row["did not learn"].endswith("): p=a")
    assert row["checks"] == "2 supported, 0 contradicted, 1 inconclusive" and row["run"].startswith("Full run, 20")
    text = docs.read_text()
    summary = text[text.index(SUMMARY_BEGIN) : text.index(SUMMARY_END)]
    assert "| `handmade`: handmade | supported in part |" in summary
    assert "| `pending`: pending | not measured yet |" in summary
    # what was between the markers is not read: an unmeasured question says so, the published one is its result
    assert "Not run yet." not in text and "Not measured yet: `python -m zoo.lab run pending`" in text
    assert render(text, results) == text  # rendering again changes nothing
    assert write_page(docs) == 1 and docs.read_text() == text
    # the per-seed CSV went beside the plots and the result, and the section links it there
    assert (docs.parent / "lab" / "handmade" / PER_SEED_CSV).is_file()
    assert f"](lab/handmade/{PER_SEED_CSV})" in text


def test_a_margin_above_chance_is_the_bar_and_the_recipe_a_line_beside_it(tmp_path):
    checks = [{"name": "b beats a", "metric": "val/acc", "expect": "greater", "points": [{"p": "b"}, {"p": "a"}]}]
    reference = {"kind": "chance", "metric": "val/acc", "num_classes": 10, "margin": 0.5, "recipe": 0.973}
    lab = {"reference": reference, "table": ["val/acc"]}
    sweep = make_sweep(tmp_path / "sweep", {"a": spread(0.45), "b": spread(0.9)}, checks, lab)
    for folder in sweep.iterdir():  # accuracies: a near 0.45 (well above chance, below the bar), b near 0.9
        record = json.loads((folder / "result.json").read_text())
        record["metrics"]["val/acc"] = record["value"]
        (folder / "result.json").write_text(json.dumps(record))
    text = write_report(sweep)[0].read_text()
    assert "**Reference** for val/acc: chance 0.1, chance + 0.5 = 0.6, tuned recipe 0.973." in text
    assert "does not beat chance + 0.5 did not learn" in text
    assert "inconclusive. p=a did not learn (validation accuracy 0.45 ≤ chance + 0.5 = 0.6)" in text
    assert "beats chance + 0.5 |" in next(line for line in text.splitlines() if line.startswith("| b | 5 | "))
    with pytest.raises(ValueError, match="margin must be a number >= 0"):
        reference_config({"reference": {**reference, "margin": -0.1}})
