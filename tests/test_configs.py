"""Every shipped YAML composes and its objects instantiate."""

from __future__ import annotations

from pathlib import Path

import hydra
import lightning as L
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf, open_dict

from zoo.entry.builders import build_callbacks, build_loggers, build_model_config, task_inputs

CONF = Path(__file__).resolve().parents[1] / "zoo" / "conf"


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def compose_train(tmp_path: Path, overrides: list[str], config_name: str = "train"):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name=config_name, overrides=overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        cfg.paths.root_dir = str(CONF.parents[1])
        cfg.paths.output_dir = str(tmp_path)
    return cfg


def test_every_group_has_options():
    for group in (
        "model",
        "data",
        "trainer",
        "logger",
        "callbacks",
        "paths",
        "hydra",
        "experiment",
        "debug",
        "hparams_search",
        "hydra/launcher",
    ):
        assert options(group), f"zoo/conf/{group} is empty"


@pytest.mark.parametrize("model", options("model"))
def test_model_configs_build_task(model, tmp_path):
    """Each model config picks its own data; model and task instantiate with the data's vocabulary."""
    cfg = compose_train(tmp_path, [f"model={model}"])
    datamodule = hydra.utils.instantiate(cfg.data, _convert_="all")
    net_cfg = build_model_config(cfg.model.net, datamodule)
    for field, value in datamodule.model_fields.items():
        assert net_cfg[field] == value
    if model == "gpt2":
        with_meta = hydra.utils.instantiate(net_cfg)  # 124M: built once, fine on CPU
        assert with_meta.num_parameters() == 124_439_808 - (50257 - datamodule.vocab_size) * 768 - (1024 - 128) * 768
    net = hydra.utils.instantiate(net_cfg)
    task = hydra.utils.instantiate(cfg.model, net=net, **task_inputs(datamodule))
    assert isinstance(task, L.LightningModule)
    optim = task.configure_optimizers()
    assert isinstance(optim["optimizer"], torch.optim.Optimizer) and optim["lr_scheduler"]["interval"] == "step"


def test_model_default_data_can_be_overridden(tmp_path):
    assert compose_train(tmp_path, ["model=gpt"]).data.tokenizer == "char"
    assert compose_train(tmp_path, ["model=gpt2"]).data.tokenizer == "bpe"
    assert compose_train(tmp_path, ["model=gpt2", "data=shakespeare_char"]).data.tokenizer == "char"


@pytest.mark.parametrize("data", options("data"))
def test_data_configs(data, tmp_path):
    """Each data config builds its DataModule on the real data (or data made here) and yields a training batch."""
    overrides = [f"data={data}"]
    if data == "text_files":
        text = tmp_path / "t.txt"
        text.write_text("hello world, this is my own text.\n" * 200)
        overrides.append(f"data.text_files=[{text}]")
    if data == "token_shards":
        from zoo.data.prepare import PrepareOptions, prepare_shards

        text = tmp_path / "t.txt"
        text.write_text("".join(f"paragraph {i}: my own text, in shards.\n\n" for i in range(400)))
        options = PrepareOptions(tokenizer="char", documents="paragraphs", inputs={"train": [str(text)], "val": None})
        prepare_shards(options, tmp_path / "shards", log=lambda _: None)
        overrides.append(f"data.shards={tmp_path / 'shards'}")
    if data == "litdata":  # shards made as above, written as LitData chunks into a folder standing for the bucket
        pytest.importorskip("litdata", reason="LitData is not installed (pip install 'transformer-zoo[litdata]')")
        from zoo.data.litdata_stream import main
        from zoo.data.prepare import PrepareOptions, prepare_shards

        text = tmp_path / "t.txt"
        text.write_text("".join(f"paragraph {i}: my own text, in chunks.\n\n" for i in range(400)))
        options = PrepareOptions(tokenizer="char", documents="paragraphs", inputs={"train": [str(text)], "val": None})
        prepare_shards(options, tmp_path / "shards", log=lambda _: None)
        main(["optimize", f"--shards={tmp_path / 'shards'}", f"--output={tmp_path / 'bucket'}", "--block-size=64"])
        overrides.append(f"data.input_dir={tmp_path / 'bucket'}")
    if data == "image_folder":
        from test_data_images import make_tree

        overrides += [f"data.image_folder={make_tree(tmp_path / 'tree', per_class=12)}", "data.batch_size=4"]
    cfg = compose_train(tmp_path, overrides)
    if data == "cifar10" and not (Path(cfg.paths.data_dir) / "cifar10").exists():
        pytest.skip("CIFAR-10 is not in ZOO_DATA_DIR (the data directory CI uses has no copy)")
    dm = hydra.utils.instantiate(cfg.data, _convert_="all")
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    first = next(iter(batch.values())) if isinstance(batch, dict) else next(iter(batch))
    assert isinstance(first, torch.Tensor) and first.shape[0] >= 1
    if "batch_size" in cfg.data and cfg.data.batch_size:
        assert first.shape[0] <= cfg.data.batch_size


@pytest.mark.parametrize("trainer", options("trainer"))
def test_trainer_configs(trainer, tmp_path):
    cfg = compose_train(tmp_path, [f"trainer={trainer}"])
    if cfg.trainer.accelerator == "gpu" and not torch.cuda.is_available():
        assert cfg.trainer.devices in (1, -1)
        pytest.skip("GPU trainer configs instantiate only where a GPU is present")
    assert isinstance(hydra.utils.instantiate(cfg.trainer, logger=False), L.Trainer)


@pytest.mark.parametrize("logger", options("logger"))
def test_logger_configs(logger, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    cfg = compose_train(tmp_path, [f"logger={logger}"])
    loggers = build_loggers(cfg.get("logger"))
    expected = {"csv": 1, "tensorboard": 1, "wandb": 1, "many_loggers": 3, "none": 0}[logger]
    assert len(loggers) == expected


@pytest.mark.parametrize("callbacks", options("callbacks"))
def test_callback_configs(callbacks, tmp_path):
    cfg = compose_train(tmp_path, [f"callbacks={callbacks}"])
    assert len(build_callbacks(cfg.get("callbacks"))) == {"default": 9, "probes": 14, "none": 0}[callbacks]


@pytest.mark.parametrize("experiment", options("experiment"))
def test_experiment_configs(experiment, tmp_path, shakespeare_path):
    overrides = [f"experiment={experiment}"]
    if experiment == "gpt2_finetune":  # model.pretrained is required: a tiny GPT-2 directory made here
        from test_pretrained_runs import tiny_gpt2

        tiny_gpt2(tmp_path / "gpt2", shakespeare_path.read_text(encoding="utf-8")[:30_000], n_positions=256)
        overrides.append(f"model.pretrained={tmp_path / 'gpt2'}")
    cfg = compose_train(tmp_path, overrides)
    assert cfg.task_name == experiment
    datamodule = hydra.utils.instantiate(cfg.data, _convert_="all")
    net = hydra.utils.instantiate(build_model_config(cfg.model.net, datamodule))
    hydra.utils.instantiate(cfg.model, net=net, **task_inputs(datamodule))
    hydra.utils.instantiate(cfg.trainer, logger=False)


def test_gpt_shakespeare_char_is_nanogpts_recipe(tmp_path):
    cfg = compose_train(tmp_path, ["experiment=gpt_shakespeare_char"])
    net = hydra.utils.instantiate(build_model_config(cfg.model.net, hydra.utils.instantiate(cfg.data)))
    c = net.config
    assert (c.n_layer, c.n_head, c.n_embd, c.block_size, c.dropout) == (4, 4, 128, 64, 0.0)
    assert cfg.data.batch_size == 12 and cfg.trainer.max_steps == 2000
    assert cfg.model.optimizer.lr == 1e-3 and list(cfg.model.optimizer.betas) == [0.9, 0.99]
    assert cfg.model.weight_decay == 0.1 and cfg.trainer.gradient_clip_val == 1.0
    assert cfg.model.scheduler.warmup_steps == 100 and cfg.model.scheduler.max_steps == 2000
    assert cfg.model.scheduler.min_lr_ratio == pytest.approx(0.1)
    assert cfg.trainer.val_check_interval == 250 and cfg.trainer.limit_val_batches == 20


@pytest.mark.parametrize("debug", options("debug"))
def test_debug_configs(debug, tmp_path):
    cfg = compose_train(tmp_path, [f"debug={debug}"])
    trainer = hydra.utils.instantiate(cfg.trainer, logger=False)
    assert trainer.max_steps == 20 or trainer.fast_dev_run


def test_eval_config_composes(tmp_path):
    cfg = compose_train(tmp_path, ["ckpt_path=x.ckpt"], config_name="eval")
    assert cfg.split == "test" and cfg.get("data") is None
    hydra.utils.instantiate(cfg.trainer, logger=False)


def test_wandb_goes_offline_without_credentials(tmp_path, monkeypatch):
    """No API key and no netrc entry: the wandb logger config resolves to offline; with a key, online."""
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(tmp_path / ".netrc"))
    assert compose_train(tmp_path, ["logger=wandb"]).logger.wandb.offline is True
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert compose_train(tmp_path, ["logger=wandb"]).logger.wandb.offline is False


@pytest.mark.parametrize("launcher, target", [("slurm", "submitit"), ("parallel", "joblib")])
def test_launcher_configs(launcher, target, tmp_path):
    cfg = compose_train(tmp_path, [f"hydra/launcher={launcher}"])
    assert target in cfg.hydra.launcher._target_
    if launcher == "slurm":
        assert cfg.hydra.launcher.nodes == cfg.trainer.num_nodes


def test_fsdp_trainer_builds_the_fsdp2_strategy(tmp_path):
    """The FSDP trainer config builds zoo's FSDP2 strategy on CPU too: bf16 parameters for compute, fp32 gradient
    reduction, full state-dict checkpoints (one file)."""
    from zoo.strategies.fsdp import FSDP2Strategy

    cfg = compose_train(tmp_path, ["trainer=fsdp"])
    strategy = hydra.utils.instantiate(cfg.trainer.strategy)
    assert isinstance(strategy, FSDP2Strategy)
    assert strategy.fsdp_options == {
        "param_dtype": torch.bfloat16,
        "reduce_dtype": torch.float32,
        "reshard_after_forward": True,
    }
    assert strategy._save_distributed_checkpoint is False


@pytest.mark.parametrize("search", options("hparams_search"))
def test_hparams_search_configs(search, tmp_path):
    cfg = compose_train(tmp_path, [f"hparams_search={search}"])
    assert "optuna" in cfg.hydra.sweeper._target_.lower()
    for key in cfg.hydra.sweeper.params:  # every searched key exists in the composed config
        assert OmegaConf.select(cfg, key, default="<missing>") != "<missing>", key
