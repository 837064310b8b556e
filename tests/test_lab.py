"""The lab: every question's config composes and builds at every sweep point, the quick runs write a report
with plots, the verdict follows the checks (their intervals, at least 5 seeds), the probes measure what they say."""

from __future__ import annotations

import itertools
import json
import math
from functools import partial
from pathlib import Path

import hydra
import pytest
import torch
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from lab_sweeps import one_job, sweep_of_copies
from omegaconf import OmegaConf, open_dict

from zoo.entry.builders import build_callbacks, build_model_config
from zoo.lab.decide.claims import VERDICTS, canonical_value, check_config, select
from zoo.lab.probes.attention_stats import diagonal_mass, entropy, logit_variance, max_probability
from zoo.lab.questions.configs import question_names
from zoo.lab.report.report import write_report

from conftest import ROOT, run_module

CONF = ROOT / "zoo" / "conf"
QUESTIONS = question_names()
# The real quick runs (`python -m zoo.lab run <name> --quick`: the sweep, every job's probes, the report and its plots)
# are three, one of each kind of question: a language model with the attention and gradient probes, an image question,
# and a measurement job. Every question is composed and built at every sweep point below; the other families are
# tested on ONE real job each (train.py with the question's quick overrides, one point) and on the report of a quick
# grid of copies of that job (tests/lab_sweeps.py): the report, claims, tuning and plots are functions of the sweep
# folder, what the jobs record a function of one job. Those jobs: positions (the length probe), norm_text (batch norm
# in a language model, its statistics probe), residual (the token-spread probe) and ln_placement (the
# encoder-decoder Transformer on Multi30k, the per-stack gradient ratio) below, in ONE_JOB; positions_sst2 (SST-2
# classification, the word-order probe, the per-example records) in tests/test_lab_word_order.py, window_cost (a
# measure timing its arms in one job) in tests/test_lab_timing.py, why_normalize (the activation probe, the loss
# curve, a rate tuned per arm) in tests/test_lab_tune.py, direction (character tagging, bidirectional vs causal) in
# tests/test_lab_direction.py, one job each of bn_vit and inductive_bias (ViT, CNN, the BN fold and BN statistics
# probes) in tests/test_lab_part2.py. dot_vs_additive (additive attention, the cost probe) runs as the scaled-down
# `python -m zoo.lab gpu --cpu` run of tests/test_lab_gpu_script.py.
# Same family as a kept run, so not run here: heads and qk_proj (as scaling), activation (as why_normalize; its
# timing job: tests/test_lab_checks_activation.py), norm_text_sst2 (as positions_sst2; the masked batch norm's
# statistics: tests/test_lab_part2.py), and the sub-questions heads_multi30k and window_loss (a BPE trained per
# session and val BLEU decoding; long windows: one job in tests/test_lab_checks_window.py).
QUICK = [
    "scaling",  # a GPT LM with the attention and gradient probes, per layer and projection (checked below)
    "residual_mnist",  # an image question: the plain vs residual MLP on MNIST, with the fit-error probe
    "decoding",  # a measure job: the decoding cost, measured after training
]
# Overrides added to a quick run: scaling's quick grid runs 5 seeds (20 jobs); two seeds run every job's code.
QUICK_EXTRA = {"scaling": ["seed=1,2"]}
# The questions of issue 11 (the sub-questions included), all in the lab.
ISSUE_11 = ["scaling", "dot_vs_additive", "qk_proj", "heads", "positions", "positions_sst2", "window_cost", "decoding"]
ISSUE_11 += ["heads_multi30k", "window_loss"]
# Sizes the data would give, for building the non-LM models without training their tokenizers here.
SST2_FIELDS = {"vocab_size": 8192, "pad_token_id": 0, "num_labels": 2}
MULTI30K_FIELDS = {
    "src_vocab_size": 8000,
    "tgt_vocab_size": 8000,
    "max_len": 256,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
DATA_FIELDS = {
    "positions_sst2": SST2_FIELDS,
    "norm_text_sst2": SST2_FIELDS,
    "ln_placement": MULTI30K_FIELDS,
    "heads_multi30k": {
        "src_vocab_size": 8000,
        "tgt_vocab_size": 8000,
        "max_len": 256,
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
    },
}


def run_lab(*args: str, timeout: int = 600):
    """`python -m zoo.lab args...` in a process of its own (forked from tests/script_server.py)."""
    return run_module("zoo.lab", *args, timeout=timeout)


def compose_question(name: str, tmp_path: Path, extra: list[str] = ()):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[f"experiment=lab/{name}", *extra], return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        cfg.paths.root_dir = str(tmp_path)
        cfg.paths.output_dir = str(tmp_path)
    return cfg


def sweep_grid(cfg) -> list[dict[str, str]]:
    params = {k: [v.strip() for v in str(v).split(",")] for k, v in cfg.hydra.sweeper.params.items()}
    return [dict(zip(params, combo)) for combo in itertools.product(*params.values())]


PART2 = [
    "norm_text",
    "norm_text_sst2",
    "bn_vit",
    "residual",
    "ln_placement",
    "activation",
    "direction",
    "inductive_bias",
    "why_normalize",
]


def test_the_lab_has_the_questions_of_issue_11():
    assert set(ISSUE_11) <= set(QUESTIONS)


def test_the_lab_has_the_questions_of_issue_12():
    assert set(PART2) <= set(QUESTIONS)


# Reads no data file that differs between the data folder and the fixtures (a language model's vocabulary is tiny
# shakespeare's, the same text in both; an image dataset's fields come from its spec; the classifiers and translators
# take DATA_FIELDS): it runs once in CI, not again on the fixtures, except where a question's name names a dataset.
@pytest.mark.parametrize("name", QUESTIONS)
def test_question_composes_and_builds_at_every_sweep_point(name, tmp_path):
    cfg = compose_question(name, tmp_path)
    lab = OmegaConf.to_container(cfg.lab)
    assert lab["name"] == name and lab["claim"] and lab["checks"] and lab["plots"] and lab["quick"]
    grid = sweep_grid(cfg)
    seeds = {p["seed"] for p in grid}
    assert len(seeds) >= 2, f"{name}: every point needs >= 2 seeds"
    swept = {k: {canonical_value(p[k]) for p in grid} for k in grid[0]}
    arms = OmegaConf.select(cfg, "measure.arms")  # one job's interleaved arms: points of the report too
    swept.update({k: {canonical_value(v) for v in values} for k, values in (arms or {}).items()})
    for i, check in enumerate(lab["checks"]):  # each check names swept values that exist
        check_config(check, i)
        for selector in check["points"]:
            for key, value in selector.items():
                assert key in swept, f"{name}: check '{check['name']}' selects on {key}, which is not swept"
                assert canonical_value(value) in swept[key], f"{name}: {key}={value} not swept"
    assert OmegaConf.select(cfg, "hydra.callbacks.lab_report._target_") == "zoo.lab.report.report.LabReport"
    callbacks = build_callbacks(cfg.callbacks)
    assert any(type(c).__name__ == "AttentionProbe" for c in callbacks)
    if cfg.get("optimized_metric") == "val/acc":  # the classifiers record their dev examples, for McNemar's test
        assert any(type(c).__name__ == "PerExampleRecorder" for c in callbacks)
    if cfg.get("measure") is not None:
        assert callable(hydra.utils.get_method(cfg.measure._target_))
    datamodule = None
    if name not in DATA_FIELDS:
        datamodule = hydra.utils.instantiate(cfg.data, _convert_="all")
    built = set()
    for point in grid:  # every distinct model of the sweep resolves and builds (seeds aside)
        key = tuple(sorted((k, v) for k, v in point.items() if k != "seed"))
        if key in built:
            continue
        built.add(key)
        # A swept config group (the model: a ViT or a CNN) is a choice of file: compose the point with it.
        groups = [f"{k}={v}" for k, v in point.items() if (CONF / k).is_dir()]
        point_cfg = compose_question(name, tmp_path, groups) if groups else cfg.copy()
        for k, v in point.items():
            if not (CONF / k).is_dir():
                OmegaConf.update(point_cfg, k, yaml.safe_load(v))  # "16" -> 16, "null" -> None, "none" stays text
        net_cfg = point_cfg.model.net
        if datamodule is not None:
            net_cfg = build_model_config(net_cfg, datamodule)
        else:
            net_cfg = net_cfg.copy()
            with open_dict(net_cfg):
                net_cfg.update(DATA_FIELDS[name])
        net = hydra.utils.instantiate(net_cfg, _convert_="all")
        assert net.num_parameters() > 0
        for k, v in point.items():  # the switch reached the model's config
            if k.startswith("model.net.") and v != "null":
                assert canonical_value(getattr(net.config, k.removeprefix("model.net."))) == canonical_value(v)
            if (CONF / k).is_dir():
                assert type(net).__name__.lower() == v  # the cnn file built the CNN


@pytest.mark.slow
@pytest.mark.lab
def test_list_prints_every_question_with_its_claim():
    result = run_lab("list")
    assert result.returncode == 0, result.stderr
    for name in QUESTIONS:
        assert f"{name}: " in result.stdout and f"python -m zoo.lab run {name}" in result.stdout
    assert result.stdout.count("claim: ") == len(QUESTIONS)


@pytest.mark.slow
@pytest.mark.lab
def test_a_bad_question_name_is_a_one_line_error_naming_the_known_ones():
    result = run_lab("run", "scalling", "--quick")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown lab question 'scalling'" in lines[0]
    assert all(name in lines[0] for name in QUESTIONS)


@pytest.mark.slow
@pytest.mark.lab
def test_report_of_a_folder_that_is_not_a_lab_sweep_is_a_one_line_error(tmp_path):
    result = run_lab("report", str(tmp_path))
    assert result.returncode == 2 and "is not a lab sweep" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow
@pytest.mark.lab
@pytest.mark.parametrize("name", QUICK)
def test_quick_run_writes_report_and_plots(name, tmp_path):
    sweep = tmp_path / name
    result = run_lab("run", name, "--quick", *QUICK_EXTRA.get(name, []), f"hydra.sweep.dir={sweep}")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    # >= 2 points x >= 2 seeds: a job each, or (a timing question) one job per seed holding every arm
    results = assert_lab_report(sweep, min_arms=4)
    QUICK_RUN_CHECKS.get(name, lambda _: None)(results)


def probes_ran_at_init_and_later_per_layer_and_projection(results: list[dict]) -> None:
    metrics = results[0]["metrics"]
    for key in (
        "probe/attn/entropy/l0@init",
        "probe/attn/diag_mass/l1@init",
        "probe/attn/logit_var/mean@init",
        "probe/grad/l0@init",
        "probe/grad_group/attn.q@init",
        "probe/grad_group/attn.k@init",
    ):
        assert key in metrics
    assert len(results[0]["probes"]) >= 2


def fit_error_and_gradient_ratio_of_the_mlps(results: list[dict]) -> None:
    """Every MLP's fit error on both splits and no attention probe; the plain depth-10 net's gradient ratio (first
    block over last) and its per-layer norms."""
    for record in results:
        metrics = record["metrics"]
        assert 0 <= metrics["lab/train_error"] <= 1 and 0 <= metrics["lab/val_error"] <= 1
        assert not any(k.startswith("probe/attn/") for k in metrics)
    plain = {"model.net.depth=10", "model.net.shortcut=false"}
    [plain_10] = [r for r in results if plain <= {o.lower() for o in r["overrides"]}]
    assert "probe/grad/first_over_last@init" in plain_10["metrics"] and "probe/grad/l3@init" in plain_10["metrics"]


def every_decoding_number_carries_its_timings_flag(results: list[dict]) -> None:
    """Numbers read off the timed generations (growth with position, first/last tokens, tokens/s) carry the spread
    and contention flag of the timing they come from: a check never decides on a contended one."""
    for record in results:
        for arm in record["arms"]:
            m = arm["metrics"]
            for name in ("lab/decode_growth", "lab/decode_ms_first", "lab/decode_ms_last", "lab/decode_tokens_per_sec"):
                assert m[name + "/contended"] == m["lab/decode_ms_per_token/contended"], name
                assert m[name + "/spread"] == m["lab/decode_ms_per_token/spread"], name


# What a quick run of these questions records besides the report (a table, not branches in the test: the test's
# source names no dataset, so the `data` marker of tests/conftest.py goes only to the runs that read one).
QUICK_RUN_CHECKS = {
    "scaling": probes_ran_at_init_and_later_per_layer_and_projection,
    "residual_mnist": fit_error_and_gradient_ratio_of_the_mlps,
    "decoding": every_decoding_number_carries_its_timings_flag,
}


# ---- one job of a question, and the report of its quick grid of copies of that job (tests/lab_sweeps.py) ---------

# The point of the quick grid each question's one job runs.
ONE_JOB = {
    "positions": {"variant": "alibi"},
    "norm_text": {"model.net.norm": "batchnorm"},
    "residual": {"variant": "none"},  # no skip at all: the token spread the question reads collapse on
    "ln_placement": {"model.net.norm_first": "false"},  # post-LN
}


def loss_by_position_at_each_length(record: dict, config) -> None:
    """The length probe: the loss at each position of windows 1x, 2x and 4x the trained context."""
    series, context = record["series"], config.data.block_size
    assert [len(series[f"loss_by_position/{f}x"]) for f in (1, 2, 4)] == [context, 2 * context, 4 * context]
    assert all(math.isfinite(v) and v > 0 for f in (1, 2, 4) for v in series[f"loss_by_position/{f}x"])


def batch_norm_statistics_of_every_norm(record: dict, config) -> None:
    """The batch-norm statistics probe on each BatchNorm of the language model (two per block and the final one): how
    much the batch statistics move from step to step and how far they are from the running ones, all >= 0; batches
    of real text do move the batch means."""
    metrics = record["metrics"]
    labels = {k.removeprefix("probe/bn/mean_std/") for k in metrics if k.startswith("probe/bn/mean_std/")} - {"mean"}
    blocks = config.model.net.n_layer
    assert labels == {f"l{i}.norm{j}" for i in range(blocks) for j in (1, 2)} | {"blocks.final_norm"}
    for stat in ("mean_std", "var_std", "mean_dev", "var_dev"):
        assert all(metrics[f"probe/bn/{stat}/{label}"] >= 0 for label in labels), stat
    assert all(metrics[f"probe/bn/mean_std/{label}"] > 0 for label in labels)
    every = config.callbacks.loss_curve.every_n_steps
    assert len(record["series"]["train_loss"]) == config.trainer.max_steps // every  # the loss curve


def token_spread_of_every_block(record: dict, config) -> None:
    """The token-spread probe: each block's spread of the positions at init and at the last step, in depth order."""
    metrics, blocks = record["metrics"], config.model.net.n_layer
    for when in ("init", "last"):
        by_layer = record["series"][f"token_spread_by_layer@{when}"]
        assert by_layer == [metrics[f"probe/token_spread/l{i}@{when}"] for i in range(blocks)]
        assert all(0 <= v < 2 for v in by_layer)
        assert metrics[f"probe/token_spread/mean@{when}"] == pytest.approx(sum(by_layer) / blocks)


def gradient_ratio_of_each_stack(record: dict, config) -> None:
    """The encoder's and the decoder's own gradient ratio (first block over last), each from its own layers."""
    metrics, net = record["metrics"], config.model.net
    for stack, blocks in (("encoder", net.n_encoder_layers), ("decoder", net.n_decoder_layers)):
        first, last = metrics[f"probe/grad/{stack}.l0@init"], metrics[f"probe/grad/{stack}.l{blocks - 1}@init"]
        assert f"probe/grad/{stack}.l{blocks}@init" not in metrics
        assert metrics[f"probe/grad/{stack}.first_over_last@init"] == pytest.approx(first / last)
    assert "probe/grad/first_over_last@init" not in metrics  # no ratio across the two stacks


ONE_JOB_CHECKS = {
    "positions": loss_by_position_at_each_length,
    "norm_text": batch_norm_statistics_of_every_norm,
    "residual": token_spread_of_every_block,
    "ln_placement": gradient_ratio_of_each_stack,
}


@pytest.mark.slow
@pytest.mark.lab
@pytest.mark.parametrize("name", sorted(ONE_JOB))
def test_one_job_of_the_question_records_its_probes(name, tmp_path_factory):
    job_dir, record = one_job(tmp_path_factory, name, **ONE_JOB[name])
    assert_finite_probes(record["metrics"])
    ONE_JOB_CHECKS[name](record, OmegaConf.load(job_dir / "config_resolved.yaml"))


@pytest.mark.slow
@pytest.mark.lab
@pytest.mark.parametrize("name", sorted(ONE_JOB))
def test_report_and_plots_of_the_quick_grid_of_one_job(name, tmp_path_factory, tmp_path):
    job_dir, _ = one_job(tmp_path_factory, name, **ONE_JOB[name])
    sweep = sweep_of_copies(job_dir, tmp_path / name)
    write_report(sweep)
    assert_lab_report(sweep, min_arms=4)


def assert_lab_report(sweep: Path, min_arms: int, quick: bool = True) -> list[dict]:
    """A lab run's sweep folder holds a report with a verdict (saying it is a quick run when it is one) and its plots,
    and at least `min_arms` measured arms whose probe and lab metrics are all finite; returns the jobs' result.json
    records. Also used by the tests that run a question's quick run elsewhere (see QUICK)."""
    report = (sweep / "report.md").read_text()
    assert "### Verdict: " in report and ("Quick run" in report) == quick
    assert report.split("### Verdict: ")[1].split("\n")[0] in VERDICTS
    pngs = sorted(sweep.glob("lab_*.png"))
    assert pngs and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    results = [json.loads(p.read_text(), parse_constant=float) for p in sweep.glob("*/result.json")]
    arms = [{**r["metrics"], **arm["metrics"]} for r in results for arm in r.get("arms") or [{"metrics": {}}]]
    assert len(arms) >= min_arms
    for metrics in arms:
        assert_finite_probes(metrics)
    return results


def assert_finite_probes(metrics: dict[str, float]) -> None:
    """A job (or an arm of one) recorded probe or lab metrics, all of them finite."""
    probes = {k: v for k, v in metrics.items() if k.startswith(("probe/", "lab/"))}
    assert probes and all(math.isfinite(v) for v in probes.values()), probes


# ---- the verdict, on hand-made sweeps ---------------------------------------------------------------------------


def make_sweep(tmp_path: Path, values: dict[str, list[float]], checks: list[dict]) -> Path:
    """A sweep directory like a lab multirun leaves it: one job per (point, seed) with its result.json."""
    lab = {
        "name": "handmade",
        "title": "hand-made",
        "claim": "b is larger than a",
        "table": ["m"],
        "plots": [{"y": "m", "x": "p"}],
        "checks": checks,
    }
    job = 0
    for point, seeds in values.items():
        for seed, value in enumerate(seeds):
            folder = tmp_path / str(job)
            folder.mkdir(parents=True)
            OmegaConf.save(OmegaConf.create({"lab": lab}), folder / "config_resolved.yaml")
            record = {
                "job": job,
                "metric": "m",
                "value": value,
                "overrides": [f"p={point}", f"seed={seed}"],
                "metrics": {"m": value},
            }
            (folder / "result.json").write_text(json.dumps(record))
            job += 1
    return tmp_path


def verdict_of(tmp_path, values, checks) -> tuple[str, str]:
    path, outcome, plots = write_report(make_sweep(tmp_path, values, checks))
    assert plots and plots[0].read_bytes()[:4] == b"\x89PNG"
    return outcome, path.read_text()


def a_less_than(b: str) -> dict:
    return {"name": f"a < {b}", "metric": "m", "expect": "less", "points": [{"p": "a"}, {"p": b}]}


# Five seeds whose noise differs from arm to arm (a paired difference with a spread), centred on a value.
JITTER = (0.0, 0.03, -0.02, 0.01, -0.015)


def five(center: float, jitter=JITTER, scale: float = 1.0) -> list[float]:
    return [center + scale * j for j in jitter]


def other(center: float, scale: float = 1.0) -> list[float]:
    return five(center, JITTER[::-1], scale)


def test_verdict_supported_when_every_claim_check_is(tmp_path):
    outcome, text = verdict_of(
        tmp_path, {"a": five(1.0), "b": other(2.0), "c": five(3.0)}, [a_less_than("b"), a_less_than("c")]
    )
    assert outcome == "supported" and "Claim checks: 2 supported, 0 contradicted, 0 inconclusive (of 2)" in text
    assert "| a | 5 | 1.001 ± 0.02 |" in text  # mean ± sample standard deviation over the five seeds
    assert "(paired t, 5 seeds)" in text and "95% CI" in text and "Holm" in text


def test_verdict_supported_in_part_when_some_checks_are_contradicted(tmp_path):
    checks = [a_less_than("b"), {"name": "b < a", "metric": "m", "expect": "less", "points": [{"p": "b"}, {"p": "a"}]}]
    outcome, text = verdict_of(tmp_path, {"a": five(1.0), "b": other(2.0)}, checks)
    assert outcome == "supported in part" and "**b < a**: contradicted" in text


def test_verdict_contradicted_when_every_claim_check_is(tmp_path):
    outcome, text = verdict_of(tmp_path, {"a": five(3.0), "b": other(2.0)}, [a_less_than("b")])
    assert outcome == "contradicted" and "**a < b**: contradicted" in text


def test_a_difference_within_the_seed_noise_is_inconclusive_not_contradicted(tmp_path):
    # b's mean is higher, but the seeds scatter more than the gap: the interval of the difference spans zero.
    outcome, text = verdict_of(tmp_path, {"a": five(1.0, scale=20), "b": other(1.1, scale=20)}, [a_less_than("b")])
    assert outcome == "inconclusive" and "**a < b**: inconclusive" in text
    outcome, _ = verdict_of(
        tmp_path / "tight", {"a": five(1.5, scale=0.1), "b": other(1.8, scale=0.1)}, [a_less_than("b")]
    )
    assert outcome == "supported"


def test_two_seeds_decide_nothing_however_clear_the_numbers(tmp_path):
    outcome, text = verdict_of(tmp_path, {"a": [1.0, 1.1], "b": [2.0, 2.1]}, [a_less_than("b")])
    assert outcome == "inconclusive"
    assert "2 seeds per point, a supported or contradicted outcome needs at least 5" in text


def test_trend_similar_threshold_and_interior_checks(tmp_path):
    values = {"1": five(3.0), "2": other(2.0), "4": five(2.5), "8": other(2.51)}
    checks = [
        {"name": "U", "metric": "m", "expect": "interior_min", "points": [{"p": 1}, {"p": 2}, {"p": 4}]},
        {"name": "down", "metric": "m", "expect": "decreasing", "points": [{"p": 1}, {"p": 2}, {"p": 4}]},
        {"name": "same", "metric": "m", "expect": "similar", "smallest_effect": 0.05, "points": [{"p": 4}, {"p": 8}]},
        {"name": "above", "metric": "m", "expect": "above", "threshold": 2.9, "points": [{"p": 1}]},
        {"name": "missing", "metric": "m", "expect": "less", "points": [{"p": 1}, {"p": 16}]},
    ]
    outcome, text = verdict_of(tmp_path, values, checks)
    assert "**U**: supported" in text and "**down**: contradicted" in text  # 2 -> 4 goes up again
    assert "**same**: supported" in text and "**above**: supported" in text
    assert "**missing**: inconclusive. not measured" in text
    assert outcome == "supported in part" and "3 supported, 1 contradicted, 1 inconclusive (of 5)" in text


def test_a_diverged_run_leaves_its_check_inconclusive(tmp_path):
    # A NaN loss (a diverged run) neither confirms nor refutes "a < b": the check is left out of the verdict.
    checks = [a_less_than("b"), {"name": "c < b", "metric": "m", "expect": "less", "points": [{"p": "c"}, {"p": "b"}]}]
    values = {"a": five(1.0), "b": other(2.0), "c": [float("nan"), *five(1.0)[1:]]}
    outcome, text = verdict_of(tmp_path, values, checks)
    assert outcome == "supported in part" and "**c < b**: inconclusive. " in text and "a run diverged" in text


def test_sanity_checks_are_listed_apart_and_never_decide_the_verdict(tmp_path):
    sanity = {
        "name": "exact",
        "metric": "m",
        "expect": "below",
        "threshold": 0.5,
        "kind": "sanity",
        "points": [{"p": "a"}],
    }
    outcome, text = verdict_of(tmp_path, {"a": five(1.0), "b": other(2.0)}, [a_less_than("b"), sanity])
    assert outcome == "supported" and "**exact**: contradicted" in text
    assert text.index("Sanity checks") < text.index("**exact**") and "(of 1)" in text


def test_malformed_checks_fail_naming_the_check():
    with pytest.raises(ValueError, match=r"lab.checks\[0\] \('x'\): unknown expect 'bigger'"):
        check_config({"name": "x", "metric": "m", "expect": "bigger", "points": [{}, {}]}, 0)
    with pytest.raises(ValueError, match="needs exactly 2 points"):
        check_config({"name": "x", "metric": "m", "expect": "less", "points": [{}]}, 0)
    points = {("a", "1"): {"p": "a", "q": "1"}, ("a", "2"): {"p": "a", "q": "2"}}
    with pytest.raises(ValueError, match="matches 2 points; name more parameters"):
        select(points, {"p": "a"}, "lab.checks[0]")
    assert select(points, {"p": "a", "q": 2}, "c") == ("a", "2") and select(points, {"p": "b"}, "c") is None
    # Hydra writes a swept boolean as True; a YAML selector says true. "none" (a switch value) is not null.
    assert canonical_value(True) == canonical_value("True") == "true"
    assert canonical_value(None) == canonical_value("null") != canonical_value("none")


# ---- the probes ---------------------------------------------------------------------------------------------


def test_a_claim_checks_similar_is_bounded_by_the_smallest_effect_not_a_relative_tolerance():
    claim = {"name": "x", "metric": "val/loss", "expect": "similar", "points": [{}, {}], "tolerance": 0.02}
    with pytest.raises(ValueError, match=r"lab.checks\[0\] \('x'\): a claim check's 'similar' is bounded by its"):
        check_config(claim, 0)
    check_config({**claim, "kind": "sanity"}, 0)  # parameter counts matched within a relative tolerance: fine


def test_statistics_of_an_identity_and_a_uniform_attention():
    eye = torch.eye(8).expand(2, 3, 8, 8)
    assert diagonal_mass(eye) == pytest.approx(1.0) and max_probability(eye) == pytest.approx(1.0)
    assert entropy(eye) == pytest.approx(0.0)
    uniform = torch.full((1, 2, 8, 8), 1 / 8)
    assert diagonal_mass(uniform) == pytest.approx(1 / 8) and entropy(uniform) == pytest.approx(math.log(8))
    logits = torch.tensor([[[[0.0, 2.0, float("-inf")], [1.0, 1.0, 1.0]]]])  # masked keys are left out
    assert logit_variance(logits) == pytest.approx((1.0 + 0.0) / 2)
    assert diagonal_mass(torch.ones(1, 1, 2, 5) / 5) is None  # no "itself" when queries and keys differ


@pytest.fixture(scope="module")
def lm_batch(data_dir, cache_dir):
    from zoo.data import LanguageModelDataModule

    data = LanguageModelDataModule(block_size=32, batch_size=4, data_dir=str(data_dir), cache_dir=str(cache_dir))
    data.setup("fit")
    return data.vocab_size, next(iter(data.val_dataloader()))


def small_task(vocab_size: int, **switches):
    from zoo.models import GPT
    from zoo.tasks import CausalLMTask

    net = GPT.from_preset("gpt-nano", vocab_size=vocab_size, block_size=32, **switches)
    return CausalLMTask(net, optimizer=partial(torch.optim.AdamW, lr=1e-3))


def test_attention_probe_on_real_text_is_finite_and_restores_the_module(lm_batch):
    from zoo.lab.probes.probes import measure_attention

    vocab, batch = lm_batch
    task = small_task(vocab).train()
    values = measure_attention(task, batch)
    for stat in ("entropy", "max_prob", "diag_mass", "logit_var"):
        assert {f"probe/attn/{stat}/l0", f"probe/attn/{stat}/l1", f"probe/attn/{stat}/mean"} <= set(values)
    assert all(math.isfinite(v) for v in values.values())
    assert 0 < values["probe/attn/max_prob/mean"] <= 1 and values["probe/attn/entropy/mean"] > 0
    assert task.training  # put back in training mode, recording off
    assert not any(getattr(m, "record_weights", False) for m in task.modules())


def test_without_projections_each_token_attends_to_itself(lm_batch):
    """q = k = x (no projections, unscaled): the score x_i . x_i = |x_i|^2 dominates its row, so the attention
    is close to the identity (the claim of the qk_proj question, measured by the probe). Positions keep repeated
    characters apart."""
    from zoo.lab.probes.probes import measure_attention

    vocab, batch = lm_batch
    task = small_task(vocab, qk_proj="none", attn_scale="none")
    values = measure_attention(task, batch)
    assert values["probe/attn/diag_mass/l0"] > 0.9
    separate = measure_attention(small_task(vocab), batch)
    assert separate["probe/attn/diag_mass/l0"] < 0.5


def test_gradient_norms_per_layer_and_projection(lm_batch):
    from zoo.lab.probes.probes import gradient_norms

    vocab, (idx, targets) = lm_batch
    task = small_task(vocab)
    task.net.loss(idx, targets).backward()
    values = gradient_norms(task)
    for key in (
        "probe/grad/l0",
        "probe/grad/l1",
        "probe/grad/total",
        "probe/grad_group/attn.q",
        "probe/grad_group/attn.k",
        "probe/grad_group/attn.v",
        "probe/grad_group/attn.out",
        "probe/grad_group/ffn",
        "probe/grad_group/norm",
        "probe/grad_group/embedding",
    ):
        assert key in values and math.isfinite(values[key]) and values[key] > 0, key
    d = task.net.config.n_embd
    q_rows = [p.grad[:d] for layer in task.net.blocks.layers for p in layer.self_attn.qkv.parameters()]
    q_norm = math.sqrt(sum(float(g.square().sum()) for g in q_rows))
    assert values["probe/grad_group/attn.q"] == pytest.approx(q_norm, rel=1e-5)  # the Q rows of the fused matrix
    assert values["probe/grad/total"] == pytest.approx(
        math.sqrt(sum(float(p.grad.square().sum()) for p in task.parameters() if p.grad is not None)), rel=1e-5
    )


def test_publish_writes_the_measured_block_between_the_markers(tmp_path):
    from zoo.lab.report.publish import publish

    sweep = make_sweep(tmp_path / "sweep", {"a": five(1.0), "b": other(2.0)}, [a_less_than("b")])
    docs = tmp_path / "docs" / "lab.md"
    docs.parent.mkdir()
    docs.write_text(
        "# Lab\n\n### Measured\n\n<!-- measured:handmade -->\nPending.\n<!-- /measured:handmade -->\n\nEnd.\n"
    )
    assert publish(sweep, docs) == ("handmade", "supported")
    text = docs.read_text()
    assert "Pending." not in text and text.startswith("# Lab") and text.rstrip().endswith("End.")
    assert (
        "| a | 5 | 1.001 ± 0.02 |" in text
        and "#### Verdict: supported" in text
        and "python -m zoo.lab run handmade" in text
    )
    images = sorted(p.name for p in (tmp_path / "docs" / "lab" / "handmade").glob("*.png"))
    assert images == ["lab_1_m.png", "lab_paired_differences.png"]  # the plot of m, and of the check's a - b
    assert all(f"](lab/handmade/{name})" in text for name in images)
    publish(sweep, docs)  # a second run replaces the block instead of adding one
    assert docs.read_text().count("#### Verdict") == 1

    docs.write_text("no markers here\n")
    with pytest.raises(ValueError, match="measured:handmade"):
        publish(sweep, docs)


def test_publish_refuses_a_quick_run(tmp_path):
    from zoo.lab.report.publish import publish

    sweep = make_sweep(tmp_path / "sweep", {"a": [1.0, 1.1], "b": [2.0, 2.1]}, [a_less_than("b")])
    for config in sweep.glob("*/config_resolved.yaml"):
        cfg = OmegaConf.load(config)
        cfg.lab.mode = "quick"
        OmegaConf.save(cfg, config)
    docs = tmp_path / "lab.md"
    docs.write_text("<!-- measured:handmade -->\n<!-- /measured:handmade -->\n")
    with pytest.raises(ValueError, match="quick run"):
        publish(sweep, docs)


def test_diverged_worst_counts_a_diverged_point_as_the_worse_one(tmp_path):
    values = {"b": five(2.0), "c": [float("nan"), *other(1.0)[1:]]}  # one seed of c diverged
    worse = {"name": "b < c", "metric": "m", "expect": "less", "diverged": "worst", "points": [{"p": "b"}, {"p": "c"}]}
    better = {**worse, "name": "c < b", "points": [{"p": "c"}, {"p": "b"}]}
    outcome, text = verdict_of(tmp_path, values, [worse, better])
    assert outcome == "supported in part" and "**b < c**: supported" in text and "**c < b**: contradicted" in text
    assert "diverged (counted as worst)" in text
    with pytest.raises(ValueError, match="diverged must be 'worst'"):
        verdict_of(tmp_path / "bad", values, [{**worse, "diverged": "best"}])
