"""Accuracies compared example by example (issue 25, item 1): McNemar's test in zoo/lab/decide/stats.py on known cases
and simulated experiments, its use by the claim checks (and the fall-back to the t test, said in the text), the records
read back from a sweep, and the recorder on a real (tiny) training run."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import partial

import lightning as L
import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from scipy import optimize as scipy_optimize
from scipy import stats as scipy_stats
from torch.utils.data import DataLoader, RandomSampler, TensorDataset

from zoo.entry.records import run_record
from zoo.lab.decide import stats
from zoo.lab.decide.claims import decide, evaluate
from zoo.lab.decide.sweep import load_sweep
from zoo.lab.probes.per_example import FILE, PerExampleRecorder, fingerprint
from zoo.lab.report.report import build_report
from zoo.models import ViT, ViTConfig
from zoo.optim.schedules import warmup_cosine
from zoo.tasks import ImageClassificationTask

POINTS = {("a",): {"p": "a"}, ("b",): {"p": "b"}}
SEEDS = ["1", "2", "3", "4", "5"]


def counts(b: int, c: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Two correctness vectors over n examples: b right only in the first, c only in the second, the rest both."""
    first = np.ones(n, dtype=bool)
    second = np.ones(n, dtype=bool)
    first[b : b + c] = False
    second[:b] = False
    return first, second


# ---- the test on known cases -------------------------------------------------------------------------------------


def test_ten_discordant_pairs_all_one_way_is_significant():
    effect = stats.mcnemar([counts(0, 10, 100)])
    assert (effect.b, effect.c, effect.total, effect.estimate) == (0, 10, 100, 0.1)
    two_sided = 2 * effect.p_above(0.0)
    exact = 2 * scipy_stats.binom.sf(9, 10, 0.5)  # the exact test's 0.00195
    assert two_sided == pytest.approx(0.0016, abs=1e-4) and abs(two_sided - exact) < 5e-4
    assert effect.p_below(0.0) > 0.99


def test_at_zero_the_score_test_is_mcnemars_chi_square():
    for b, c in ((12, 30), (40, 25), (3, 9)):
        effect = stats.mcnemar([counts(b, c, 500)])
        chi2 = (c - b) ** 2 / (b + c)
        one_sided = scipy_stats.chi2.sf(chi2, 1) / 2
        assert min(effect.p_above(0.0), effect.p_below(0.0)) == pytest.approx(one_sided, rel=1e-9)


def test_equal_discordant_counts_are_not_significant_and_the_interval_is_symmetric():
    effect = stats.mcnemar([counts(15, 15, 200)])
    assert effect.estimate == 0 and effect.p_above(0.0) == pytest.approx(0.5) and effect.p_below(0.0) == 0.5
    low, high = effect.interval()
    assert low == pytest.approx(-high) and low < 0 < high


def test_swapping_the_arms_mirrors_everything():
    forward = stats.mcnemar([counts(8, 21, 300), counts(5, 17, 300)])
    backward = stats.mcnemar([tuple(reversed(counts(8, 21, 300))), tuple(reversed(counts(5, 17, 300)))])
    assert (backward.b, backward.c) == (forward.c, forward.b) and backward.estimate == -forward.estimate
    low, high = forward.interval()
    assert backward.interval() == pytest.approx((-high, -low))
    for boundary in (0.0, 0.01, 0.05):
        assert backward.p_below(-boundary) == pytest.approx(forward.p_above(boundary))
    oriented = forward.oriented(-1)
    assert (oriented.b, oriented.c, oriented.estimate) == (backward.b, backward.c, backward.estimate)
    assert oriented.interval() == pytest.approx(backward.interval())


def test_the_null_discordance_is_the_restricted_maximum_likelihood():
    for b, c, n, delta in ((3, 20, 100, 0.05), (20, 3, 100, 0.05), (20, 3, 100, -0.1), (5, 5, 40, -0.02)):
        r = n - b - c

        def minus_loglik(x, b=b, c=c, r=r, delta=delta):
            return -(b * math.log(x) + c * math.log(x + delta) + r * math.log(1 - 2 * x - delta))

        low = max(0.0, -delta) + 1e-12
        best = scipy_optimize.minimize_scalar(minus_loglik, bounds=(low, (1 - delta) / 2 - 1e-12), method="bounded")
        assert stats._null_discordance(b, c, n, delta) == pytest.approx(2 * best.x + delta, abs=1e-6)


def test_the_interval_is_where_the_one_sided_tests_stop_rejecting():
    effect = stats.mcnemar([counts(30, 52, 872)] * 5)
    low, high = effect.interval()
    assert low < effect.estimate < high
    assert effect.p_above(low) == pytest.approx(stats.ALPHA, abs=1e-6)
    assert effect.p_below(high) == pytest.approx(stats.ALPHA, abs=1e-6)
    assert effect.tost(1.0) < 1e-6 and effect.n == 5 and effect.df == math.inf


def test_pooling_sums_each_seeds_discordant_counts():
    effect = stats.mcnemar([counts(1, 4, 50), counts(2, 3, 60)])
    assert (effect.b, effect.c, effect.total, effect.n) == (3, 7, 110, 2)


# ---- the claim checks ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    """A job's per-example record as the checks see it (sweep.PerExample without the file)."""

    vector: np.ndarray
    examples: str = "dev"

    @property
    def n(self) -> int:
        return len(self.vector)

    def correct(self):
        return self.vector


def check_on(first: list[np.ndarray], second: list[np.ndarray], lacking: str | None = None, **extra):
    """A `greater` check of the second point over the first on val/acc from per-seed correctness vectors."""
    samples, records = {}, {}
    for key, vectors in ((("a",), first), (("b",), second)):
        samples[key] = {"val/acc": {s: float(v.mean()) for s, v in zip(SEEDS, vectors)}}
        records[key] = {"val/acc": {s: Record(v) for s, v in zip(SEEDS, vectors) if s != lacking}}
    check = {"name": "b beats a", "metric": "val/acc", "expect": "less", "points": [{"p": "a"}, {"p": "b"}], **extra}
    (result,) = decide([evaluate(check, samples, POINTS, 0, None, records)])
    return result


def simulated_pair(rng, n: int, delta: float, discordance: float) -> tuple[np.ndarray, np.ndarray]:
    """One seed's two models on n examples: only the first right with probability (discordance - delta) / 2, only
    the second with (discordance + delta) / 2, both right otherwise (the true difference is delta)."""
    cell = rng.choice(3, size=n, p=[(discordance - delta) / 2, (discordance + delta) / 2, 1 - discordance])
    return cell != 1, cell != 0


def outcomes(rng, runs: int, delta: float, discordance: float, n: int = 872, **extra) -> dict[str, float]:
    seen = dict.fromkeys(("supported", "contradicted", "inconclusive"), 0)
    for _ in range(runs):
        pairs = [simulated_pair(rng, n, delta, discordance) for _ in SEEDS]
        result = check_on([a for a, _ in pairs], [b for _, b in pairs], **extra)
        seen[result.outcome] += 1
    return {k: v / runs for k, v in seen.items()}


def test_a_known_per_example_effect_is_supported_at_the_expected_rate():
    rng = np.random.default_rng(1)
    delta, discordance, boundary, total = 0.015, 0.1, 0.005, 872 * 5
    se = math.sqrt((discordance - delta**2) / total)
    power = scipy_stats.norm.sf(scipy_stats.norm.isf(stats.ALPHA) - (delta - boundary) / se)  # about 0.55
    rates = outcomes(rng, 300, delta, discordance)  # the question's smallest effect of val/acc: 0.005 by default
    # both tests must agree: never more often than McNemar alone, and the 5-seed t test still finds it at times
    assert 0.05 < rates["supported"] < power + 0.1, (rates, power)
    assert rates["contradicted"] == 0.0
    # an effect well clear of the boundary is found by both nearly every time
    rates = outcomes(rng, 200, 0.035, discordance)
    assert rates["supported"] > 0.85 and rates["contradicted"] == 0.0, rates


def test_one_badly_trained_seed_does_not_decide_against_the_other_seeds():
    # As positions_sst2's learned positions: four seeds tie, one collapsed to far fewer right answers. Pooled over
    # examples McNemar alone would call the claim contradicted at a tiny p; the seeds say the training varies.
    rng = np.random.default_rng(3)
    pairs = [simulated_pair(rng, 872, 0.0, 0.1) for _ in SEEDS[:4]]
    good, collapsed = rng.random(872) < 0.8, rng.random(872) < 0.55
    first = [a for a, _ in pairs] + [good]
    second = [b for _, b in pairs] + [collapsed]
    pooled = stats.mcnemar(list(zip(first, second))).oriented(1)  # as the check orients it: b better is positive
    assert pooled.p_below(0.005) < 1e-6  # McNemar alone: contradicted
    result = check_on(first, second)
    assert result.outcome == "inconclusive", result.detail
    assert "both must agree" in result.detail


def test_two_draws_of_one_accuracy_are_inconclusive_not_contradicted():
    rng = np.random.default_rng(2)
    rates = outcomes(rng, 400, 0.0, 0.15, smallest_effect=0)
    # each one-sided test has size 0.025: support or contradiction by chance about that often
    assert rates["supported"] <= 0.05 and rates["contradicted"] <= 0.05 and rates["inconclusive"] >= 0.9, rates


def test_the_text_names_mcnemar_its_counts_and_the_seed_level_interval():
    first, second = zip(*[counts(10, 40, 872) for _ in SEEDS])
    result = check_on(list(first), list(second))
    assert result.outcome == "supported"
    assert "McNemar, pooled over 5 seeds: b=50, c=200 of 4360 examples" in result.detail
    assert "seed-level paired t" in result.detail and "both must agree" in result.detail


def test_a_seed_without_the_record_falls_back_to_the_t_test_and_says_so():
    first, second = zip(*[counts(10, 40 + i, 872) for i, _ in enumerate(SEEDS)])
    result = check_on(list(first), list(second), lacking="3")
    assert "McNemar, pooled" not in result.detail
    assert "(paired t, 5 seeds)" in result.detail
    assert "t test, not McNemar: no per-example record for seed(s) 3" in result.detail


def test_records_of_different_examples_are_not_paired():
    first, second = zip(*[counts(10, 40 + i, 872) for i, _ in enumerate(SEEDS)])
    samples = {
        k: {"val/acc": {s: float(v.mean()) for s, v in zip(SEEDS, vs)}} for k, vs in ((("a",), first), (("b",), second))
    }
    records = {
        ("a",): {"val/acc": {s: Record(v) for s, v in zip(SEEDS, first)}},
        ("b",): {"val/acc": {s: Record(v, examples="other") for s, v in zip(SEEDS, second)}},
    }
    check = {"name": "c", "metric": "val/acc", "expect": "less", "points": [{"p": "a"}, {"p": "b"}]}
    result = evaluate(check, samples, POINTS, 0, None, records)
    assert "t test, not McNemar: the points' records cover different dev examples" in result.detail


def test_similar_and_other_metrics_keep_the_t_test_without_a_note():
    first, second = zip(*[counts(10, 12, 872) for _ in SEEDS])
    result = check_on(list(first), list(second), expect="similar")
    assert "McNemar" not in result.detail and "TOST" not in result.detail and "equivalence bound" in result.detail
    samples = {("a",): {"m": dict(zip(SEEDS, [1.0, 2, 3, 4, 5]))}, ("b",): {"m": dict(zip(SEEDS, [2.0, 3, 4, 5, 7]))}}
    check = {"name": "c", "metric": "m", "expect": "less", "points": [{"p": "a"}, {"p": "b"}]}
    assert "McNemar" not in evaluate(check, samples, POINTS, 0).detail
    # val/acc without any record (a sweep from before the recorder): the t test, and the text says why
    samples = {key: {"val/acc": {s: v / 10 for s, v in values["m"].items()}} for key, values in samples.items()}
    detail = evaluate({**check, "metric": "val/acc"}, samples, POINTS, 0).detail
    assert "t test, not McNemar: no job recorded which dev examples it got right" in detail


# ---- records read back from a sweep ---------------------------------------------------------------------------------


def make_sweep(root, vectors: dict[str, list[np.ndarray]], skip: tuple[str, str] | None = None):
    """A sweep of points a and b, 5 seeds, val/acc with a per-example record (but for the job `skip`)."""
    lab = {
        "name": "handmade",
        "title": "hand-made",
        "claim": "b is more accurate",
        "mode": "full",
        "table": ["val/acc"],
        "plots": [],
        "checks": [{"name": "b beats a", "metric": "val/acc", "expect": "greater", "points": [{"p": "b"}, {"p": "a"}]}],
    }
    job = 0
    for point, per_seed in vectors.items():
        for seed, correct in zip(SEEDS, per_seed):
            folder = root / str(job)
            (folder / ".hydra").mkdir(parents=True)
            overrides = [f"p={point}", f"seed={seed}"]
            OmegaConf.save(OmegaConf.create(overrides), folder / ".hydra" / "overrides.yaml")
            OmegaConf.save(OmegaConf.create({"lab": lab}), folder / "config_resolved.yaml")
            accuracy = float(np.float32(correct.mean()))  # as torchmetrics reports it
            record = {"metric": "val/acc", "value": accuracy, "overrides": overrides, "metrics": {"val/acc": accuracy}}
            if (point, seed) != skip:
                np.save(folder / FILE, correct)
                entry = {"file": FILE, "n": len(correct), "of": len(correct), "accuracy": float(correct.mean())}
                record["per_example"] = {"val/acc": {**entry, "examples": fingerprint(np.arange(len(correct)) % 2)}}
            (folder / "result.json").write_text(json.dumps(record))
            job += 1
    return root


def test_a_sweeps_records_decide_by_mcnemar_and_a_missing_one_by_t(tmp_path):
    first, second = zip(*[counts(10, 40, 872) for _ in SEEDS])
    sweep = load_sweep(make_sweep(tmp_path / "full", {"a": list(first), "b": list(second)}))
    assert sweep.per_example(["val/acc"])[("b",)]["val/acc"]["3"].correct().sum() == 872 - 10
    text, facts, _ = build_report(sweep)
    assert facts["outcome"] == "supported" and "McNemar, pooled over 5 seeds: b=200, c=50 of 4360 examples" in text

    sweep = load_sweep(make_sweep(tmp_path / "lacking", {"a": list(first), "b": list(second)}, skip=("a", "4")))
    text, _, _ = build_report(sweep)
    assert "t test, not McNemar: no per-example record for seed(s) 4" in text


def test_a_record_that_is_not_the_reported_accuracy_is_left_out(tmp_path):
    first, second = zip(*[counts(10, 40, 872) for _ in SEEDS])
    root = make_sweep(tmp_path, {"a": list(first), "b": list(second)})
    path = root / "0" / "result.json"
    record = json.loads(path.read_text())
    record["per_example"]["val/acc"]["accuracy"] = 0.5
    path.write_text(json.dumps(record))
    assert "1" not in load_sweep(root).per_example(["val/acc"])[("a",)]["val/acc"]


# ---- the recorder on a real run -------------------------------------------------------------------------------------


def tiny_run(tmp_path, val_loader_of, limit_val_batches=1.0):
    """A tiny ViT trained 3 steps on 40 random 8x8 images, validated by `val_loader_of(dataset)` as train.py does
    (fit, then validate once more); returns the task, its val set, the recorder and the record."""
    torch.manual_seed(0)
    images, labels = torch.randn(40, 1, 8, 8), torch.randint(0, 3, (40,))
    val = TensorDataset(torch.randn(23, 1, 8, 8), torch.randint(0, 3, (23,)))
    config = ViTConfig(image_size=8, patch_size=4, in_channels=1, num_classes=3, embed_dim=16, depth=1, num_heads=2)
    optimizer, scheduler = partial(torch.optim.AdamW, lr=1e-2), partial(warmup_cosine, warmup_steps=1, max_steps=3)
    task = ImageClassificationTask(ViT(config), optimizer, scheduler, log_images=False)
    recorder = PerExampleRecorder(str(tmp_path))
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=3,
        limit_val_batches=limit_val_batches,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[recorder],
        default_root_dir=tmp_path,
    )
    train = DataLoader(TensorDataset(images, labels), batch_size=8)
    trainer.fit(task, train, val_loader_of(val))
    metrics = dict(trainer.callback_metrics)
    trainer.validate(task, val_loader_of(val), verbose=False)
    metrics.update(trainer.callback_metrics)
    return task, val, recorder, run_record(trainer, metrics)


@pytest.mark.lab  # trains a tiny ViT in this process
def test_the_recorder_writes_which_dev_examples_the_final_model_got_right(tmp_path):
    task, val, _, record = tiny_run(tmp_path, lambda data: DataLoader(data, batch_size=5))
    entry = record["per_example"]["val/acc"]
    with torch.no_grad():
        expected = (task.eval()(val.tensors[0]).argmax(-1) == val.tensors[1]).numpy()
    correct = np.load(tmp_path / entry["file"])
    np.testing.assert_array_equal(correct, expected)  # the dataset's order, whatever the batches
    assert (entry["n"], entry["of"]) == (23, 23) and entry["examples"] == fingerprint(val.tensors[1].numpy())
    assert entry["accuracy"] == pytest.approx(record["metrics"]["val/acc"], abs=1e-6)


@pytest.mark.lab  # trains a tiny ViT in this process
def test_a_cut_short_pass_records_its_first_examples_and_a_shuffled_one_nothing(tmp_path):
    _, val, _, record = tiny_run(tmp_path / "cut", lambda data: DataLoader(data, batch_size=5), limit_val_batches=2)
    entry = record["per_example"]["val/acc"]
    assert (entry["n"], entry["of"]) == (10, 23) and entry["examples"] == fingerprint(val.tensors[1][:10].numpy())

    def shuffled(data):
        return DataLoader(data, batch_size=5, sampler=RandomSampler(data))

    with pytest.warns(UserWarning, match="shuffling enabled"):  # Lightning's own warning, for the same reason
        _, _, recorder, record = tiny_run(tmp_path / "shuffled", shuffled)
    assert "per_example" not in record and "RandomSampler" in recorder.skipped
    assert not (tmp_path / "shuffled" / FILE).exists()
