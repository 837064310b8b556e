"""The task base (zoo.tasks.base.ZooTask), for each of the five tasks built from its shipped config on real data:
one set of parameter names compiled or not, load_from_checkpoint from a real short fit, the optimizer set-up
(fused AdamW for ViT, layer-wise lr decay), throughput and MFU through the ThroughputMonitor subclass."""

from __future__ import annotations

import csv
import math

import hydra
import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger
from test_configs import compose_train

from zoo.callbacks.throughput_monitor import ZooThroughputMonitor
from zoo.entry.builders import build_model_config, task_inputs
from zoo.tasks import ZooTask

# Each task's config, shrunk to a tiny model and a slice of its real data.
TASKS = {
    "gpt": ["model=gpt", "model.net.name=gpt-nano", "data.block_size=32", "data.batch_size=4"],
    "bert": [
        "model=bert_tiny",
        "data.max_documents=40",
        "data.block_size=32",
        "data.batch_size=4",
        "data.dupe_factor=1",
        "data.vocab_size=1000",
    ],
    "bert_classifier": [
        "model=bert_classifier",
        "model.net.name=bert-tiny",
        "data.max_train_rows=64",
        "data.max_val_rows=16",
        "data.batch_size=4",
        "data.block_size=32",
        "data.vocab_size=1000",
    ],
    "vit": ["model=vit", "data.batch_size=8", "data.eval_batch_size=8", "data.split_sizes=[64,16,16]"],
    "transformer": [
        "model=transformer",
        "model.net.name=transformer-tiny",
        "data.max_tokens=256",
        "data.vocab_size=1000",
    ],
}


def build(name: str, tmp_path, *overrides: str):
    """(task, datamodule) as train.py builds them from the config."""
    cfg = compose_train(tmp_path, [*TASKS[name], *overrides])
    datamodule = hydra.utils.instantiate(cfg.data, _convert_="all")
    torch.manual_seed(0)
    net = hydra.utils.instantiate(build_model_config(cfg.model.net, datamodule), _convert_="all")
    task = hydra.utils.instantiate(cfg.model, net=net, **task_inputs(datamodule), _convert_="all")
    return task, datamodule


def outputs(task: ZooTask, batch) -> list[torch.Tensor]:
    """The network's outputs for a batch, through the task's forward."""
    with torch.no_grad():
        if task.task_name == "causal_lm":
            return [task(batch[0])]
        if task.task_name == "mlm_nsp":
            out = task(batch)
            return [out.mlm_logits, out.nsp_logits]
        if task.task_name == "sequence_classification":
            return [task(batch)]
        if task.task_name == "image_classification":
            return [task(batch[0])]
        return [task(batch.src, batch.tgt_in, batch.src_mask)]


@pytest.mark.parametrize("name", list(TASKS))
def test_one_set_of_parameter_names_compiled_or_not(name, tmp_path):
    task, _ = build(name, tmp_path)
    keys = list(task.state_dict())
    assert keys == ["net." + k for k in task.net.state_dict()]  # each tensor once, under the network's names
    assert not any("_orig_mod" in k or "_forward_fn" in k for k in keys)
    compiled, _ = build(name, tmp_path, "model.compile=true")
    assert list(compiled.state_dict()) == keys


@pytest.fixture(scope="module", params=list(TASKS))
def trained(request, tmp_path_factory):
    """A real fit of 4 steps with the throughput monitor and a CSV logger, then a checkpoint."""
    tmp_path = tmp_path_factory.mktemp(request.param)
    task, datamodule = build(request.param, tmp_path)
    trainer = L.Trainer(
        max_steps=4,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        log_every_n_steps=2,
        logger=CSVLogger(tmp_path, name="csv", version=""),
        callbacks=[ZooThroughputMonitor()],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        default_root_dir=tmp_path,
    )
    trainer.fit(task, datamodule=datamodule)
    trainer.save_checkpoint(tmp_path / "last.ckpt")
    return task, datamodule, tmp_path


def test_load_from_checkpoint_rebuilds_the_trained_task(trained):
    task, datamodule, tmp_path = trained
    path = tmp_path / "last.ckpt"
    loaded = type(task).load_from_checkpoint(path)
    assert type(loaded) is type(task) and type(ZooTask.load_from_checkpoint(path)) is type(task)
    assert loaded.state_dict().keys() == task.state_dict().keys()
    batch = next(iter(datamodule.val_dataloader()))
    for ours, theirs in zip(outputs(task.eval(), batch), outputs(loaded.eval(), batch), strict=True):
        torch.testing.assert_close(theirs, ours, rtol=0, atol=0)
    # The recorded optimizer and scheduler come back: the rebuilt task trains as configured.
    assert dict(loaded.hparams) == dict(task.hparams)
    config = loaded.configure_optimizers()
    assert type(config["optimizer"]) is type(task.trainer.optimizers[0])
    assert [g["initial_lr"] for g in config["optimizer"].param_groups] == [
        g["initial_lr"] for g in task.trainer.optimizers[0].param_groups
    ]


def test_throughput_monitor_logs_throughput_and_mfu(trained):
    task, _, tmp_path = trained
    with open(tmp_path / "csv" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    unit = "images" if task.task_name == "image_classification" else "tokens"
    for key in (f"train/{unit}_per_sec", "train/mfu"):
        values = [float(r[key]) for r in rows if r.get(key)]
        assert len(values) == 2, key  # window = log_every_n_steps = 2: logged at steps 2 and 4
        assert all(math.isfinite(v) and v > 0 for v in values), (key, values)


def test_load_from_checkpoint_refuses_other_tasks_and_unknown_options(tmp_path):
    from zoo.tasks import CausalLMTask, ImageClassificationTask

    task, _ = build("vit", tmp_path)
    trainer = L.Trainer(logger=False, accelerator="cpu", default_root_dir=tmp_path)
    trainer.strategy.connect(task)
    trainer.save_checkpoint(tmp_path / "vit.ckpt")
    with pytest.raises(ValueError, match="'image_classification' checkpoint.*load it with ImageClassificationTask"):
        CausalLMTask.load_from_checkpoint(tmp_path / "vit.ckpt")
    with pytest.raises(TypeError, match="takes no option.*tokenizer"):
        ImageClassificationTask.load_from_checkpoint(tmp_path / "vit.ckpt", tokenizer=None)
    # A checkpoint from before the base: every tensor also under "_forward_fn." (dropped), and an option that
    # moved to the throughput callback (left out, with a warning naming it).
    checkpoint = torch.load(tmp_path / "vit.ckpt", weights_only=True)
    checkpoint["hyper_parameters"]["peak_flops_per_sec"] = 1.0
    checkpoint["state_dict"].update({"_forward_fn." + k[4:]: v for k, v in checkpoint["state_dict"].items()})
    torch.save(checkpoint, tmp_path / "old.ckpt")
    with pytest.warns(UserWarning, match="peak_flops_per_sec"):
        loaded = ImageClassificationTask.load_from_checkpoint(tmp_path / "old.ckpt")
    torch.testing.assert_close(loaded.net.patch_embed.proj.weight, task.net.patch_embed.proj.weight, rtol=0, atol=0)


def test_recorded_partials_naming_the_former_modules_rebuild_to_zoo_optim():
    """Checkpoints written before the optimizers and schedules moved out of zoo.tasks name the old modules; those
    names rebuild to the functions and classes of zoo.optim, and a name outside torch.optim and zoo.optim is still
    refused (a checkpoint must not name arbitrary code, nor other code of zoo.tasks)."""
    from zoo.optim.inverse_sqrt import warmup_inverse_sqrt
    from zoo.optim.muon import MuonWithAdamW
    from zoo.optim.schedules import warmup_cosine
    from zoo.tasks.factories import describe_partial, rebuild_partial

    old = {"_target_": "zoo.tasks.optim.warmup_cosine", "_partial_": True, "warmup_steps": 2, "max_steps": 10}
    scheduler = rebuild_partial(old, kind="scheduler", source="old.ckpt")
    assert scheduler.func is warmup_cosine and scheduler.keywords == {"warmup_steps": 2, "max_steps": 10}
    assert describe_partial(scheduler)["_target_"] == "zoo.optim.schedules.warmup_cosine"  # recorded anew
    old = {"_target_": "zoo.tasks.schedules.warmup_inverse_sqrt", "_partial_": True, "warmup_steps": 4}
    assert rebuild_partial(old, kind="scheduler", source="old.ckpt").func is warmup_inverse_sqrt
    old = {"_target_": "zoo.tasks.muon.MuonWithAdamW", "_partial_": True, "lr": 0.02}
    optimizer = rebuild_partial(old, kind="optimizer", source="old.ckpt")
    assert optimizer.func is MuonWithAdamW and optimizer.keywords == {"lr": 0.02}
    for target in ("os.system", "zoo.tasks.base.ZooTask", "zoo.tasks.optim.not_a_schedule"):
        with pytest.raises(ValueError, match=f"refusing to import the recorded scheduler '{target}'"):
            rebuild_partial({"_target_": target, "_partial_": True}, kind="scheduler", source="old.ckpt")


def test_vit_optimizer_is_fused_adamw_in_fp32_and_foreach_where_lightning_refuses_fused(tmp_path):
    task, _ = build("vit", tmp_path)
    task.trainer = L.Trainer(
        precision="32-true", gradient_clip_val=1.0, logger=False, accelerator="cpu", default_root_dir=tmp_path
    )
    optimizer = task.configure_optimizers()["optimizer"]
    assert type(optimizer) is torch.optim.AdamW and optimizer.defaults["fused"] is True
    # Lightning refuses gradient clipping with a fused optimizer under *-mixed precision: foreach there.
    task.trainer = L.Trainer(
        precision="bf16-mixed", gradient_clip_val=1.0, logger=False, accelerator="cpu", default_root_dir=tmp_path
    )
    assert task.configure_optimizers()["optimizer"].defaults["fused"] is False


def test_layer_decay_gives_the_documented_per_layer_lrs(tmp_path):
    """Block i of L trains at lr * decay^(L + 1 - (i + 1)), the embeddings at lr * decay^(L + 1), the final norm
    and the head at lr; biases, norms, the class token and positions do not decay."""
    task, _ = build("vit", tmp_path, "model.layer_decay=0.5", "model.net.depth=3")
    optimizer = task.configure_optimizers()["optimizer"]
    lr = task.optimizer_factory.keywords["lr"]
    expected = {
        "cls_token": lr * 0.5**4,
        "patch_embed.proj.weight": lr * 0.5**4,
        "blocks.layers.0.self_attn.qkv.weight": lr * 0.5**3,
        "blocks.layers.2.self_attn.qkv.weight": lr * 0.5**1,
        "head.weight": lr,
        "head.bias": lr,
    }
    by_name = {id(p): n for n, p in task.net.named_parameters()}
    found = {}
    for group in optimizer.param_groups:
        for param in group["params"]:
            found[by_name[id(param)]] = (group["initial_lr"], group["weight_decay"])
    assert len(found) == len(by_name)
    for name, value in expected.items():
        assert found[name][0] == pytest.approx(value), name
    assert found["cls_token"][1] == found["head.bias"][1] == 0.0 and found["head.weight"][1] > 0


@pytest.mark.slow
def test_resume_with_compile_toggled(tmp_path):
    """2 steps compiled, then resumed uncompiled to 4: the checkpoint's names are the network's either way."""

    def fit(task, datamodule, max_steps, ckpt_path=None):
        trainer = L.Trainer(
            max_steps=max_steps,
            limit_val_batches=0,
            num_sanity_val_steps=0,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            accelerator="cpu",
            default_root_dir=tmp_path,
        )
        trainer.fit(task, datamodule=datamodule, ckpt_path=ckpt_path)
        return trainer

    task, datamodule = build("gpt", tmp_path, "model.compile=true", "model.net.n_layer=1")
    fit(task, datamodule, 2).save_checkpoint(tmp_path / "compiled.ckpt")
    assert not any("_orig_mod" in k for k in torch.load(tmp_path / "compiled.ckpt", weights_only=True)["state_dict"])
    plain, datamodule = build("gpt", tmp_path, "model.net.n_layer=1")
    trainer = fit(plain, datamodule, 4, ckpt_path=tmp_path / "compiled.ckpt")
    assert trainer.global_step == 4
