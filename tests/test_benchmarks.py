"""Smoke test of the benchmark: every row runs one step; zoo and HF decode the same tokens."""

from __future__ import annotations

import functools
import json
import math

import pytest

from zoo.callbacks.throughput import CPU_SIZES, measure_matmul_peak

from benchmarks.run import FEWER_SETTINGS, auto_steps, fastest_by_family, main

# One step per row at tiny sizes (benchmarks/configs.py: TINY_SIZES): every row's code path in seconds, where the
# real sizes took minutes on a 2-core CPU. What is asserted does not depend on the sizes.
TINY = ["--smoke", "--tiny"]

# Every peer in each attention path its users can choose (issue 30), by configuration and peer family.
PEER_SETTINGS = {
    "gpt": {"hf": ["hf-sdpa", "hf-eager"]},
    "bert": {"hf": ["hf-sdpa", "hf-eager"]},
    "vit": {"timm": ["timm-fused", "timm-unfused"], "torchvision": ["torchvision"], "hf": ["hf-sdpa", "hf-eager"]},
    "transformer": {"torch-nn": ["torch-nn-transformer"], "marian": ["marian-sdpa", "marian-eager"]},
}


def test_benchmark_smoke(tmp_path, capsys):
    out = tmp_path / "bench.json"
    rows = main([*TINY, "--no-compile", "--dtypes", "fp32", "--json", str(out)])
    training = [r for r in rows if "train_ms" in r]
    assert {r["config"] for r in training} == {"gpt", "bert", "vit", "transformer"}
    for config, families in PEER_SETTINGS.items():  # every setting of every peer ran, beside zoo
        ran = {r["impl"]: r["family"] for r in training if r["config"] == config}
        assert ran == {"zoo": None, **{impl: family for family, impls in families.items() for impl in impls}}
    # zoo's ratio is against the fastest setting of any peer; each family's fastest setting is reported.
    for config in PEER_SETTINGS:
        zoo, *peers = [r for r in training if r["config"] == config]
        assert zoo["ratio"] == zoo["train_ms"] / min(r["train_ms"] for r in peers)
    summary = fastest_by_family(rows)
    assert {(f["config"], f["family"]) for f in summary} == {(c, f) for c, fs in PEER_SETTINGS.items() for f in fs}
    # MFU is finite and positive; how close to 1 it comes depends on the machine (no bound asserted here).
    assert all(
        r["train_ms"] > 0
        and math.isfinite(r["ratio"])
        and math.isfinite(r["mfu"])
        and r["mfu"] > 0
        and r["above_peak"] == (r["mfu"] > 1)
        for r in training
    )
    generation = [r for r in rows if "tokens_per_s" in r]
    assert {r["config"] for r in generation} == {"generation b1", "generation b8"}
    assert all(r["same_tokens"] for r in generation)  # same weights, greedy: identical continuations
    saved = json.loads(out.read_text())
    assert saved["meta"]["torch"] == __import__("torch").__version__ and len(saved["rows"]) == len(rows)
    assert saved["meta"]["peak_matmul_size"]["fp32"] in CPU_SIZES and saved["meta"]["peak_gflops"]["fp32"] > 0
    assert any("not a measurement" in line for line in saved["meta"]["notes"])  # a tiny run says what it is
    assert saved["meta"]["peer_settings"] == PEER_SETTINGS
    capsys.readouterr()
    assert main(["--render", str(out)]) == saved["rows"]
    shown = capsys.readouterr().out
    assert FEWER_SETTINGS not in shown and "| vit | fp32 | timm | timm-fused, timm-unfused |" in shown


def _sdpa_calls(workload, model) -> int:
    """How many times a training forward + loss of `model` calls F.scaled_dot_product_attention itself."""
    import torch.nn.functional as F
    from torch.overrides import TorchFunctionMode

    class Count(TorchFunctionMode):
        calls = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            Count.calls += func is F.scaled_dot_product_attention
            return func(*args, **(kwargs or {}))

    with Count():
        workload.loss(model, workload.batch())
    return Count.calls


@pytest.mark.parametrize("config", sorted(PEER_SETTINGS))
def test_every_peer_setting_runs_its_own_attention_path(config):
    """One workload per setting a peer's users can choose, and each built model really runs that path: HF's and
    Marian's `attn_implementation` is the one asked for, every timm attention module has the asked `fused_attn`,
    and only the SDPA / fused settings call scaled_dot_product_attention."""
    import timm.layers

    from benchmarks import configs

    s = configs.sizes(config, tiny=True)
    workloads = configs.CONFIGS[config](s)[0]
    assert {w.family for w in workloads if w.name.startswith("zoo")} == {None}
    settings = {}
    for w in workloads:
        if w.family is not None:
            settings.setdefault(w.family, []).append(w.name)
    assert settings == PEER_SETTINGS[config]
    global_default = timm.layers.use_fused_attn()
    built = {}
    for w in workloads:
        if w.family in ("hf", "marian"):
            model = w.build()
            asked = w.name.rsplit("-", 1)[1]
            assert model.config._attn_implementation == asked
            assert (_sdpa_calls(w, model) > 0) == (asked == "sdpa"), w.name
        elif w.family == "timm":
            built[w.name] = model = w.build()
            assert (_sdpa_calls(w, model) > 0) == (w.name == "timm-fused")
    if built:  # set per model: the unfused model stays unfused after the fused one is built, the global is untouched
        for name, model in built.items():
            attention = [m for m in model.modules() if isinstance(m, timm.layers.Attention)]
            assert len(attention) == s["depth"] and {m.fused_attn for m in attention} == {name == "timm-fused"}
        assert timm.layers.use_fused_attn() == global_default


def test_fastest_setting_of_each_family_counts_as_the_peer():
    """Per configuration, dtype and peer family the lowest train step is the family's; zoo's rows are divided by
    it. Rows of runs before issue 30 (no `family`) are grouped by their names."""

    def row(impl, ms, family="-", dtype="bf16"):
        r = dict(config="gpt", dtype=dtype, impl=impl, train_ms=ms)
        return r if family == "-" else {**r, "family": family}

    rows = [
        row("zoo", 100.0, None),
        row("zoo-compile", 80.0, None),
        row("hf-sdpa", 400.0, "hf"),
        row("hf-eager", 200.0, "hf"),
        row("timm-fused", 150.0, "timm"),
        row("timm-unfused", 300.0, "timm"),
        row("zoo", 90.0, None, "fp32"),
        row("hf-sdpa", 180.0, "hf", "fp32"),
        row("hf-eager", 360.0, "hf", "fp32"),
        dict(config="generation b1", dtype="bf16", impl="hf", total_ms=5.0),  # not a training row
    ]
    summary = {(f["dtype"], f["family"]): f for f in fastest_by_family(rows)}
    assert set(summary) == {("bf16", "hf"), ("bf16", "timm"), ("fp32", "hf")}
    assert summary["bf16", "hf"]["fastest"] == "hf-eager" and summary["fp32", "hf"]["fastest"] == "hf-sdpa"
    assert summary["bf16", "hf"]["settings"] == ["hf-sdpa", "hf-eager"]
    assert summary["bf16", "hf"]["zoo_vs"] == {"zoo": 0.5, "zoo-compile": 0.4}
    assert summary["bf16", "timm"]["fastest"] == "timm-fused" and summary["bf16", "timm"]["train_ms"] == 150.0
    assert summary["fp32", "hf"]["zoo_vs"] == {"zoo": 0.5}
    legacy = [row("zoo", 100.0), row("hf-sdpa", 300.0), row("hf-eager", 250.0), row("hf-marian", 200.0)]
    summary = {f["family"]: f for f in fastest_by_family(legacy)}
    assert summary["hf"]["fastest"] == "hf-eager" and summary["marian"]["zoo_vs"] == {"zoo": 0.5}


@pytest.mark.parametrize("name", ["2026-11-29-cpu-2core", "2026-12-01-cpu-2core", "2026-12-01-late-cpu-2core"])
def test_saved_runs_still_render_marked_as_measured_against_fewer_peer_settings(name, capsys):
    import pathlib

    path = pathlib.Path(__file__).parent.parent / "benchmarks" / "results" / f"{name}.json"
    rows = main(["--render", str(path)])
    shown = capsys.readouterr().out
    assert FEWER_SETTINGS in shown and "| gpt | bf16 | hf | hf-sdpa, hf-eager | hf-eager |" in shown
    assert "| transformer | fp32 | marian | hf-marian | hf-marian |" in shown
    assert sum(line.startswith("| ") for line in shown.splitlines()) > len(rows)  # every row, and the summary


@pytest.fixture(scope="module")
def gpt_rows(tmp_path_factory) -> dict[str, dict]:
    """GPT's rows with the zoo-ckpt and zoo-compile rows, by implementation: one run for the tests that read them."""
    import torch

    from benchmarks import configs

    with pytest.MonkeyPatch.context() as patch:
        # Activation memory is read from the resident set (pages, allocator slack): at the tiny GPT size the forward
        # holds ~0.3 MB, too little to compare robustly. 2 layers of width 64 over 4 x 256 tokens hold ~9 MB
        # (~1 MB with checkpointing) and still take about a second a row.
        patch.setitem(configs.TINY_SIZES, "gpt", dict(configs.TINY_SIZES["gpt"], d=64, seq=256, batch=4))
        # The zoo-compile row through Dynamo and AOTAutograd (the capture of zoo's model in training and in eval)
        # without inductor's C++ code generation, which costs about a minute of CPU on a cold cache, and this
        # session's cache is cold (tests/conftest.py). Inductor trains zoo's GPT in test_task_base
        # (test_resume_with_compile_toggled).
        patch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
        argv = [*TINY, "--configs", "gpt", "--dtypes", "fp32", "--activation-checkpointing"]
        rows = main([*argv, "--json", str(tmp_path_factory.mktemp("gpt") / "b.json")])
    return {r["impl"]: r for r in rows}


def test_compile_rows_smoke(gpt_rows):
    """The torch.compile switch has its own row (zoo's inner module compiled), ranked against the peers."""
    assert set(gpt_rows) == {"zoo", "hf-sdpa", "hf-eager", "zoo-ckpt", "zoo-compile"}
    assert gpt_rows["zoo-compile"]["train_ms"] > 0 and math.isfinite(gpt_rows["zoo-compile"]["ratio"])


def test_activation_checkpointing_row_smoke(gpt_rows):
    """`--activation-checkpointing` adds zoo's model with the option on, beside zoo's own row, so that their
    activation and peak memory can be compared; it is ranked against the peers, never counted as one. The
    activation memory (what the forward leaves held for the backward) is far smaller with it."""
    impls = gpt_rows
    assert impls["zoo-ckpt"]["train_ms"] > 0 and impls["zoo"]["ratio"] == impls["zoo"]["train_ms"] / min(
        impls[peer]["train_ms"] for peer in ("hf-sdpa", "hf-eager")
    )
    held, held_ckpt = impls["zoo"]["activation_mb"], impls["zoo-ckpt"]["activation_mb"]
    if held is not None:  # None where the resident set cannot be read (not Linux)
        assert 0 < held_ckpt < held / 2


def test_gpt2_gpu_config_is_gpt2_124m_and_runs(tmp_path):
    """The opt-in GPU row is GPT-2 124M at 1024 tokens; the same code path runs here at the tiny size."""
    import torch

    from benchmarks import configs

    assert configs.sizes("gpt2") is configs.GPT2_SIZE and configs.GPT2_SIZE["seq"] == 1024
    with torch.device("meta"):  # the parameter count without initialising 124M weights
        assert configs._zoo_gpt(configs.GPT2_SIZE).num_parameters() == 124_439_808
    rows = main([*TINY, "--no-compile", "--configs", "gpt2", "--dtypes", "bf16", "--json", str(tmp_path / "b.json")])
    assert {r["impl"] for r in rows} == {"zoo", "hf-sdpa"} and all(r["train_ms"] > 0 for r in rows)


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--configs", "gpt,vitt"], "unknown config 'vitt'"),
        (["--dtypes", "fp16"], "unknown dtype 'fp16'"),
        (["--steps", "0"], "--steps and --rounds must be at least 1"),
    ],
)
def test_bad_options_fail_before_measuring(argv, words, tmp_path):
    with pytest.raises(SystemExit, match=words):
        main([*argv, "--json", str(tmp_path / "b.json")])


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="the check is for a machine without CUDA")
def test_cuda_device_without_cuda_is_one_line(tmp_path):
    with pytest.raises(SystemExit, match="no CUDA device here"):
        main(["--device", "cuda", "--json", str(tmp_path / "b.json")])


def test_matmul_probe_reports_the_size_it_used_and_keeps_to_its_budget():
    import torch

    state = torch.get_rng_state()
    peak = measure_matmul_peak("cpu", torch.float32, sizes=(64, 128, 256), min_seconds=0.01, budget_seconds=5)
    assert peak.flops > 0 and peak.size in (64, 128, 256) and peak.seconds < 5
    assert torch.equal(torch.get_rng_state(), state)  # the probe leaves the global RNG alone (exact resume)
    # A size whose repeats cannot fit in what is left of the budget is not started.
    tight = measure_matmul_peak("cpu", torch.float32, sizes=(64, 8192), min_seconds=0.0, budget_seconds=0.05)
    assert tight.size == 64 and tight.seconds < 1


def test_measured_peak_is_kept_for_the_next_run_on_the_machine(monkeypatch, tmp_path):
    """The first run measures and writes the cache; the next one reads the same figure without measuring; a
    damaged cache file is measured over, not trusted."""
    import json

    import torch

    from zoo.callbacks import throughput

    monkeypatch.setenv("ZOO_CACHE_DIR", str(tmp_path))
    first, source = throughput.peak_flops(torch.device("cpu"))
    assert first > 0 and source == "measured now"
    (key, kept), *others = json.loads(throughput.peak_cache_file().read_text()).items()
    assert not others and kept == first and "cpu" in key and torch.__version__ in key
    again, source = throughput.peak_flops(torch.device("cpu"))
    assert again == first and source.startswith("measured earlier")
    throughput.peak_cache_file().write_text("{not json")
    assert throughput.peak_flops(torch.device("cpu"))[1] == "measured now"
    assert json.loads(throughput.peak_cache_file().read_text())  # rewritten whole


def test_default_run_skips_non_native_bf16_and_scales_steps(monkeypatch):
    import torch

    from zoo.core import hardware

    from benchmarks import native

    monkeypatch.setattr(hardware, "cpu_flags", lambda: {"avx2", "fma"})  # Zen 3: AVX2, no bf16 instructions
    dtypes, notes = native.default_dtypes(torch.device("cpu"))
    assert dtypes == ["fp32"] and "skipped bf16" in notes[0] and "avx512_bf16" in notes[0]
    monkeypatch.setattr(hardware, "cpu_flags", lambda: {"avx512f", "avx512_bf16"})
    assert native.default_dtypes(torch.device("cpu")) == (["fp32", "bf16"], [])
    monkeypatch.setattr(hardware, "cpu_flags", lambda: None)  # no /proc/cpuinfo: bf16 left out, and said so
    assert native.default_dtypes(torch.device("cpu"))[0] == ["fp32"]
    cpu = torch.device("cpu")
    assert auto_steps(cpu, 87e9) == 2 and auto_steps(cpu, 200e9) == 4 and auto_steps(cpu, 350e9) == 5


def test_profile_splits_the_step_and_groups_matmuls_by_shape(capsys):
    from benchmarks.configs import TINY_SIZES
    from benchmarks.profile import main as profile

    medians = profile(["vit", "--tiny", "--impls", "zoo,timm-fused", "--steps", "1", "--rounds", "1", "--shapes"])
    assert set(medians) == {"zoo", "timm-fused"} and all(t > 0 for times in medians.values() for t in times)
    out = capsys.readouterr().out
    # The blocks' GEMMs over every token of the batch (images x (patches + class token), width) show up by shape.
    s = TINY_SIZES["vit"]
    block_input = f"[{s['batch'] * ((s['image'] // s['patch']) ** 2 + 1)}, {s['dim']}]"
    zoo, timm = out.split("===== timm-fused: matmuls")
    assert "===== zoo: matmuls" in zoo and block_input in zoo and block_input in timm


def test_profile_names_an_unknown_implementation():
    from benchmarks.profile import main as profile

    with pytest.raises(SystemExit, match="no implementation nope in 'vit'; it has: zoo, timm-fused, timm-unfused,"):
        profile(["vit", "--impls", "nope"])
