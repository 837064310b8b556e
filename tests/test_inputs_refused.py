"""Inputs that gave a traceback, a message naming nothing, or were silently accepted (issue items 6-9): each is now
one line naming the key or file and the fix (or, where refusing would break a legitimate use, a one-line warning).
Checkpoints here are built without training (a task's own on_save_checkpoint), so the checks are quick.
"""

from __future__ import annotations

import errno
import json
import logging
import pathlib
import time
from functools import partial

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from trained import train_refused

from zoo.callbacks import phase_times, throughput
from zoo.data import CharTokenizer, TranslationTokenizer
from zoo.entry import cli
from zoo.entry.config_checks import check_config
from zoo.entry.export import main as export_main
from zoo.entry.train import _never_logged
from zoo.models import BERT, CNN, GPT, Transformer, ZooModel
from zoo.optim.build import build_optimizer
from zoo.optim.schedules import warmup_cosine, warmup_stable_decay
from zoo.tasks import CausalLMTask, ImageClassificationTask, Seq2SeqTask, SequenceClassificationTask

from conftest import run_script

SENTENCES = ["Ein Hund rennt.", "Zwei Männer lachen.", "A dog runs.", "Two men laugh."]


def saved(task, path) -> str:
    """The checkpoint a task writes (its "zoo" section and checksum), without a fit."""
    checkpoint = {"state_dict": task.state_dict()}
    task.on_save_checkpoint(checkpoint)
    torch.save(checkpoint, path)
    return str(path)


@pytest.fixture(scope="module")
def gpt_ckpt(tmp_path_factory) -> str:
    tokenizer = CharTokenizer.train("O Romeo, Romeo! wherefore art thou Romeo?\n")
    net = GPT.from_preset("gpt-nano", vocab_size=tokenizer.vocab_size, block_size=16)
    task = CausalLMTask(net, tokenizer=tokenizer, num_samples=0)
    return saved(task, tmp_path_factory.mktemp("gpt") / "last.ckpt")


@pytest.fixture(scope="module")
def transformer_ckpt(tmp_path_factory) -> str:
    tokenizer = TranslationTokenizer.train(
        SENTENCES[:2], SENTENCES[2:], vocab_size=60, joint=True, source_lang="de", target_lang="en"
    )
    net = Transformer.from_preset("transformer-tiny", src_vocab_size=tokenizer.src_vocab_size, max_len=32)
    return saved(Seq2SeqTask(net, tokenizer=tokenizer), tmp_path_factory.mktemp("tr") / "last.ckpt")


def one_line(capsys, command, argv) -> str:
    """Run an argparse entry in-process: exit 1, one `error:` line."""
    with pytest.raises(SystemExit) as stop:
        command([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 1 and err.startswith("error: ") and "\n" not in err, err
    return err


# ---- item 6: betas -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("optimizer", ["torch.optim.AdamW", "zoo.optim.muon.MuonWithAdamW"])
def test_betas_of_one_value_are_one_line_naming_the_key(tmp_path, optimizer):
    """Was an IndexError traceback from inside AdamW (MuonWithAdamW hands betas to its AdamW)."""
    result = train_refused(
        f"model.optimizer._target_={optimizer}", "model.optimizer.betas=[0.9]", f"hydra.run.dir={tmp_path}"
    )
    assert isinstance(result.error, ValueError)
    assert "model.optimizer.betas must be two numbers in [0, 1)" in result.line and "got [0.9]" in result.line
    assert not tmp_path.exists() or not any(tmp_path.iterdir())  # refused before the run directory is written


@pytest.mark.parametrize("betas", [[0.9], "abc", [0.9, "x"], [0.9, 1.0], 0.9])
def test_betas_are_checked_where_the_optimizer_is_built(betas):
    params = [torch.nn.Parameter(torch.zeros(2))]
    with pytest.raises(ValueError, match=r"model.optimizer.betas must be two numbers in \[0, 1\)"):
        build_optimizer(partial(torch.optim.AdamW, lr=1e-3, betas=betas), params)


# ---- item 7: messages that name the key, the file, and this command's options ----------------------------------
@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"model": {"optimizer": {"betas": [0.9]}}}, "model.optimizer.betas must be two numbers"),
        ({"model": {"optimizer": {"betas": "abc"}}}, "model.optimizer.betas must be two numbers"),
        ({"model": {"scheduler": {"decay_fraction": "abc"}}}, "model.scheduler.decay_fraction must be a number"),
        ({"model": {"scheduler": {"warmup_steps": 1.5}}}, "model.scheduler.warmup_steps must be an integer"),
    ],
)
def test_optimizer_and_schedule_values_are_checked_by_key(overrides, message):
    with pytest.raises(ValueError, match=message):
        check_config(OmegaConf.create(overrides))


def test_a_schedule_given_a_string_names_the_key():
    """Was "'<' not supported between instances of 'float' and 'str'", naming nothing."""
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(ValueError, match=r"model.scheduler.decay_fraction must be in \(0, 1\], got 'abc'"):
        warmup_stable_decay(opt, warmup_steps=2, max_steps=10, decay_fraction="abc")
    with pytest.raises(ValueError, match=r"model.scheduler.min_lr_ratio must be a number, got 'low'"):
        warmup_cosine(opt, warmup_steps=2, max_steps=10, min_lr_ratio="low")


def test_decay_fraction_abc_through_the_train_entry(tmp_path):
    result = train_refused(
        "model.scheduler._target_=zoo.optim.schedules.warmup_stable_decay",
        "+model.scheduler.decay_fraction=abc",
        f"hydra.run.dir={tmp_path}",
    )
    assert "model.scheduler.decay_fraction must be a number, got 'abc'" in result.line


def test_a_fast_recipe_cut_short_is_refused_before_training_with_the_fix(tmp_path):
    """The recipe validates at its step 300 only; with trainer.max_steps=5 and validate=false its val/loss is never
    logged. It trained, then failed without saying why; now it is refused before anything runs."""
    result = train_refused("experiment=gpt_shakespeare_char_fast", "trainer.max_steps=5", f"hydra.run.dir={tmp_path}")
    assert isinstance(result.error, ValueError)
    for fragment in (
        "optimized_metric=val/loss is never logged",
        "trainer.val_check_interval=300",
        "trainer.max_steps=5",
        "validate=false",
        "optimized_metric=train/loss",
    ):
        assert fragment in result.line
    assert "Epoch" not in result.stdout + result.stderr  # no training step ran


def test_the_check_lets_through_runs_that_validate():
    base = {
        "optimized_metric": "val/loss",
        "validate": False,
        "trainer": {"max_steps": 5, "val_check_interval": 300, "check_val_every_n_epoch": None},
    }
    for fine in ({"validate": True}, {"trainer": {"val_check_interval": 5}}, {"optimized_metric": "train/loss"}):
        check_config(OmegaConf.merge(base, fine))
    with pytest.raises(ValueError, match="trainer.limit_val_batches=0 runs no validation"):
        check_config(OmegaConf.merge(base, {"trainer": {"val_check_interval": 5, "limit_val_batches": 0}}))


def test_every_shipped_experiment_passes_the_new_checks():
    """The checks above refuse no recipe as shipped (their betas, warm-ups and validation intervals)."""
    conf = pathlib.Path(__file__).resolve().parents[1] / "zoo" / "conf"
    experiments = [p for p in (conf / "experiment").rglob("*.yaml") if "common" not in p.parts]
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        for path in experiments:
            name = path.relative_to(conf / "experiment").with_suffix("").as_posix()
            cfg = compose("train", overrides=[f"experiment={name}"])
            # A recipe that needs a value from the user (gpt2_finetune: the model to start from) is refused
            # without it and checked with one.
            required = list(cfg.get("required") or [])
            if required:
                with pytest.raises(ValueError, match="give it on the command line"):
                    check_config(cfg)
                cfg = compose("train", overrides=[f"experiment={name}", *(f"{key}=given" for key in required)])
            check_config(cfg)
    assert len(experiments) > 20


def test_a_metric_missing_after_the_run_says_why_how_and_where_the_checkpoint_is():
    cfg = OmegaConf.create({"validate": False, "trainer": {"max_steps": 5, "val_check_interval": 0.5}})
    message = _never_logged(cfg, "val/loss", {"train/loss": 1.0}, "/runs/x/checkpoints/last.ckpt")
    assert message.startswith("optimized_metric 'val/loss' was never logged")
    for fragment in ("did not run within trainer.max_steps=5", "lower trainer.val_check_interval", "train/loss"):
        assert fragment in message
    assert message.endswith("the run's checkpoint is kept: /runs/x/checkpoints/last.ckpt")


@pytest.fixture(scope="module")
def cnn_ckpt(tmp_path_factory) -> str:
    net = CNN.from_preset("resnet8", in_channels=1, image_size=28)
    task = ImageClassificationTask(net, image_mean=[0.13], image_std=[0.31], log_images=False)
    return saved(task, tmp_path_factory.mktemp("cnn") / "last.ckpt")


def test_export_of_a_cnn_says_it_has_no_hugging_face_class(capsys, tmp_path, cnn_ckpt):
    """Was "image_mean/image_std were given for a CNN, which reads no images"."""
    err = one_line(capsys, export_main, [cnn_ckpt, tmp_path / "hf"])
    assert "CNN (cnn) has no Hugging Face class" in err and "--format zoo" in err and "image_mean" not in err
    assert not (tmp_path / "hf").exists()
    export_main([cnn_ckpt, str(tmp_path / "zoo"), "--format", "zoo"])  # the way the message points to works
    assert type(ZooModel.from_pretrained(tmp_path / "zoo")) is CNN


def test_export_errors_suggest_its_own_options(capsys, tmp_path, monkeypatch, gpt_ckpt):
    err = one_line(capsys, export_main, [tmp_path / "missing.ckpt", tmp_path / "out"])
    assert "check the CHECKPOINT argument" in err and "ckpt_path" not in err

    real_mkdir = pathlib.Path.mkdir

    def refused(self, *args, **kwargs):
        if self.name.startswith(".out."):  # the export's staging folder
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "mkdir", refused)
    err = one_line(capsys, export_main, [gpt_ckpt, tmp_path / "out"])
    assert "Permission denied; fix the permissions or export into another DIRECTORY" in err
    assert "hydra.run.dir" not in err


def test_generate_names_an_input_file_that_is_not_text(capsys, tmp_path, transformer_ckpt):
    binary = tmp_path / "sentences.bin"
    binary.write_bytes(b"Ein Hund.\n" + bytes([0xD0, 0x28]) + b"\n")
    err = one_line(capsys, cli.generate, [transformer_ckpt, "--input", binary])
    assert f"{binary} is not UTF-8 text (byte offset 10, line 2" in err and "--input" in err


# ---- item 8: silently accepted, now refused or warned ------------------------------------------------------------
def test_the_transformer_refuses_characters_outside_its_vocabulary(capsys, transformer_ckpt):
    """Was translated with the characters turned into <unk>; the GPT refuses the same input."""
    err = one_line(capsys, cli.generate, [transformer_ckpt, "--source", "Ein Hund rennt.", "--source", "Ein ☃ ♞."])
    assert "sentence 2 has characters '☃♞'" in err and "<unk>" in err
    cli.generate([transformer_ckpt, "--source", "Ein Hund rennt.", "--beam-size", "1"])  # in-vocabulary: translated
    assert capsys.readouterr().out.count("\n") == 1


def test_tokenizer_lists_the_unknown_source_characters():
    tokenizer = TranslationTokenizer.train(
        SENTENCES[:2], SENTENCES[2:], vocab_size=60, joint=True, source_lang="de", target_lang="en"
    )
    assert tokenizer.unknown_source_characters("Ein Hund") == []
    assert tokenizer.unknown_source_characters("Ein ☃ und ☃ß") == ["ß", "☃"]


def bert_classifier() -> BERT:
    return BERT.from_preset("bert-tiny", head="classification", vocab_size=50, num_labels=2)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"mlm_steps": 1.5}, "model.mlm_steps must be an integer"),
        ({"mlm_steps": "3"}, "model.mlm_steps must be an integer"),
        ({"mlm_steps": 0, "mlm_probability": 1.5}, r"model.mlm_probability must be in \(0, 1\), got 1.5"),
        ({"mlm_probability": "high"}, r"model.mlm_probability must be in \(0, 1\), got 'high'"),
    ],
)
def test_masked_lm_phase_options_are_checked_even_when_the_phase_is_off(options, message):
    with pytest.raises(ValueError, match=message):
        SequenceClassificationTask(bert_classifier(), **options)


def test_a_warmup_as_long_as_the_run_is_one_warning_line(caplog):
    """Not refused: a smoke run (trainer.max_steps=5 with a recipe's warm-up) is one. One line with both numbers."""
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    with caplog.at_level(logging.WARNING, logger="zoo.optim.schedules"):
        warmup_cosine(opt, warmup_steps=9, max_steps=10)
        assert not caplog.records
        warmup_stable_decay(opt, warmup_steps=100, max_steps=10)
    (record,) = caplog.records
    assert record.levelno == logging.WARNING and "\n" not in record.getMessage()
    assert "model.scheduler.warmup_steps=100 >= the schedule's max_steps=10" in record.getMessage()


@pytest.mark.parametrize(
    "option, message",
    [
        (["--beam-size", "0"], "--beam-size must be >= 1 (1: greedy decoding), got 0"),
        (["--max-new-tokens", "1000000000000"], "--max-new-tokens must be between 0 and 1,000,000"),
        (["--batch-size", "0"], "--batch-size must be >= 1, got 0"),
    ],
)
def test_generate_options_refused_before_the_checkpoint_is_read(capsys, tmp_path, option, message):
    err = one_line(capsys, cli.generate, [tmp_path / "missing.ckpt", *option])
    assert message in err


def test_translation_options_given_for_a_gpt_are_refused(capsys, gpt_ckpt):
    """A GPT has no beam search: --beam-size 3 was silently ignored."""
    err = one_line(capsys, cli.generate, [gpt_ckpt, "--beam-size", "3"])
    assert "--beam-size is for translating with a Transformer checkpoint" in err and "--temperature 0" in err
    err = one_line(capsys, cli.generate, [gpt_ckpt, "--length-penalty", "1", "--max-len-b", "5"])
    assert "--length-penalty, --max-len-b are for translating" in err
    cli.generate([gpt_ckpt, "--prompt", "Romeo", "--max-new-tokens", "3"])  # without them it samples
    assert "----- sample 0 -----" in capsys.readouterr().out


def test_sampling_options_given_for_a_transformer_are_refused(capsys, transformer_ckpt):
    """A translation is a beam search: --temperature and --top-k were silently ignored."""
    err = one_line(capsys, cli.generate, [transformer_ckpt, "--source", "Ein Hund.", "--temperature", "0.8"])
    assert "--temperature is for sampling from a GPT checkpoint" in err and "--beam-size" in err
    err = one_line(capsys, cli.generate, [transformer_ckpt, "--source", "Ein Hund.", "--top-k", "5", "--seed", "1"])
    assert "--top-k, --seed are for sampling from a GPT checkpoint" in err
    cli.generate([transformer_ckpt, "--source", "Ein Hund rennt.", "--beam-size", "1"])  # without them it translates
    assert capsys.readouterr().out.count("\n") == 1


def test_export_overwrite_replaces_the_whole_directory(tmp_path, gpt_ckpt, monkeypatch):
    out = tmp_path / "out"
    export_main([gpt_ckpt, str(out)])  # Hugging Face format: with tokenizer files
    assert (out / "tokenizer.json").is_file()
    export_main([gpt_ckpt, str(out), "--format", "zoo", "--overwrite"])
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging folder left beside it

    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def fails(self, directory, **kwargs):
        (pathlib.Path(directory) / "config.json").write_text("{half")
        raise OSError(errno.ENOSPC, "No space left on device", str(directory))

    monkeypatch.setattr(ZooModel, "save_pretrained", fails)
    with pytest.raises(SystemExit):
        export_main([gpt_ckpt, str(out), "--format", "zoo", "--overwrite"])
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # the earlier export, intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_export_overwrite_refuses_a_directory_that_is_not_an_export(capsys, tmp_path, gpt_ckpt):
    (tmp_path / "notes.txt").write_text("mine")
    err = one_line(capsys, export_main, [gpt_ckpt, tmp_path, "--format", "zoo", "--overwrite"])
    assert "holds notes.txt, which no export writes" in err
    assert (tmp_path / "notes.txt").read_text() == "mine"


# ---- item 9: per-job start-up, and a stored MFU peak that cannot be right ----------------------------------------
def test_a_later_job_counts_its_startup_from_its_own_start(monkeypatch):
    monkeypatch.setattr(phase_times, "_job_starts", [])
    phase_times.mark_job_start()
    first = phase_times.PhaseTimes()
    assert first.started_from in ("process start", "zoo import") and first.started <= phase_times._job_starts[0]
    time.sleep(0.01)
    phase_times.mark_job_start()  # job 1 of a multirun, in the same process
    later = phase_times.PhaseTimes()
    assert later.started_from == "job start" and later.started == phase_times._job_starts[1] > first.started


@pytest.mark.slow
def test_each_job_of_a_multirun_reports_its_own_startup(tmp_path):
    sweep = tmp_path / "sweep"
    result = run_script(
        "train.py",
        "-m",
        "model.optimizer.lr=0.001,0.002",
        "trainer.max_steps=2",
        "validate=false",
        "test=false",
        "optimized_metric=null",
        "model.num_samples=0",
        f"hydra.sweep.dir={sweep}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    first, second = (json.loads((sweep / job / "timings.json").read_text()) for job in ("0", "1"))
    assert first["startup_from"] == "process start" and second["startup_from"] == "job start"
    # Job 1's start-up is its own building of data, model and trainer, not job 0's whole run as well.
    assert second["time/startup_s"] < first["time/total_s"]


def test_a_stored_peak_below_a_quick_probe_is_measured_again(monkeypatch, tmp_path):
    monkeypatch.setenv("ZOO_CACHE_DIR", str(tmp_path))
    cpu = torch.device("cpu")
    key = throughput._machine_key(cpu, torch.float32)
    throughput.peak_cache_file().write_text(json.dumps({key: 1000.0}))  # 1 kFLOP/s: a machine busy elsewhere
    flops, source = throughput.peak_flops(cpu)
    assert flops > 1e6 and source.startswith("measured again: the 0.0 GFLOP/s kept in")
    assert json.loads(throughput.peak_cache_file().read_text())[key] == flops  # stored for the next run

    throughput.peak_cache_file().write_text(json.dumps({key: 1e18}))  # above any probe: kept, nothing measured
    assert throughput.peak_flops(cpu) == (
        1e18,
        f"measured earlier, kept in {throughput.peak_cache_file()}; delete the file to measure again",
    )
