"""Two optimization levers every task can switch on from YAML: Muon for the block matrices with AdamW for the rest
(zoo.optim.muon.MuonWithAdamW) and the warm-up / stable / decay schedule (zoo.optim.schedules.warmup_stable_decay)."""

from __future__ import annotations

import copy
import csv
import io
import math
from functools import partial

import hydra
import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import LearningRateMonitor
from lightning.pytorch.loggers import CSVLogger
from test_configs import compose_train

from zoo.entry.builders import build_model_config, task_inputs
from zoo.models import GPT, ViT, ViTConfig
from zoo.optim.build import build_optimizer
from zoo.optim.muon import BatchedMuon, MuonWithAdamW
from zoo.optim.param_groups import layer_decay_groups, param_groups
from zoo.optim.schedules import restarted_schedule, warmup_cosine, warmup_stable_decay
from zoo.tasks import ZooTask


def small_gpt() -> GPT:
    torch.manual_seed(0)
    return GPT.from_preset("gpt-nano", vocab_size=40, block_size=16)


def small_vit() -> ViT:
    torch.manual_seed(0)
    config = dict(image_size=16, patch_size=4, in_channels=1, num_classes=5, embed_dim=32, depth=2, num_heads=4)
    return ViT(ViTConfig(**config, mlp_dim=64))


def expected_muon_names(model) -> set[str]:
    """Written from the parameter names, not from the module types the optimizer looks at: the 2-D tensors of
    the blocks' attention and feed-forward layers."""
    return {
        name
        for name, p in model.named_parameters()
        if name.startswith("blocks.layers.") and p.dim() == 2 and (".self_attn." in name or ".ff." in name)
    }


def names_in(model, groups: list[dict]) -> list[str]:
    by_id = {id(p): n for n, p in model.named_parameters()}
    return [by_id[id(p)] for group in groups for p in group["params"]]


@pytest.mark.parametrize("make", [small_gpt, small_vit], ids=["gpt", "vit"])
def test_block_matrices_go_to_muon_and_everything_else_to_adamw(make):
    model = make()
    opt = MuonWithAdamW(param_groups(model, 0.1), model=model, lr=1e-3)
    muon, adamw = names_in(model, opt.muon.param_groups), names_in(model, opt.adamw.param_groups)
    every = [n for n, _ in model.named_parameters()]
    assert sorted(muon + adamw) == sorted(every)  # each parameter exactly once
    assert set(muon) == expected_muon_names(model) and len(muon) == 4 * 2  # qkv, out, fc1, fc2 per block
    others = {"pos_emb.weight", "blocks.layers.0.norm1.weight", "blocks.layers.0.self_attn.qkv.bias"}
    others |= {"tok_emb.weight"} if make is small_gpt else {"patch_embed.proj.weight", "cls_token", "head.weight"}
    assert others <= set(adamw)
    # Our groups are the inner optimizers' own dicts, Muon's first; the group options (weight decay) are kept.
    assert all(a is b for a, b in zip(opt.param_groups, opt.muon.param_groups + opt.adamw.param_groups, strict=True))
    assert [g["weight_decay"] for g in opt.param_groups] == [0.1, 0.1, 0.0]


def test_layer_decay_groups_keep_their_lr_scale_in_both_optimizers():
    model = small_vit()
    opt = MuonWithAdamW(layer_decay_groups(model, 0.05, 0.5), model=model, lr=1e-3)
    scales = {name: group["lr_scale"] for group in opt.param_groups for name in names_in(model, [group])}
    assert scales["blocks.layers.0.self_attn.qkv.weight"] == 0.5**2  # depth 1 of L + 1 = 3: a Muon group
    assert scales["blocks.layers.0.self_attn.qkv.bias"] == 0.5**2
    assert scales["head.weight"] == 1.0 and scales["cls_token"] == 0.5**3


def batch(step: int) -> torch.Tensor:
    return torch.randint(0, 40, (2, 16), generator=torch.Generator().manual_seed(step))


def train_steps(model, optimizer, steps, scheduler=None, first: int = 0) -> None:
    for step in range(first, first + steps):
        optimizer.zero_grad()
        tokens = batch(step)
        logits = model(tokens)
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())
        loss.backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()


OPTIONS = dict(lr=2e-3, betas=(0.9, 0.95), muon_momentum=0.9, adjust_lr_fn="match_rms_adamw")


def test_steps_equal_torch_muon_and_adamw_applied_by_hand():
    model = small_gpt()
    ours = MuonWithAdamW(param_groups(model, 0.1), model=model, fused=True, muon_impl="torch", **OPTIONS)
    ref_model = copy.deepcopy(model)
    hidden = expected_muon_names(ref_model)
    named = list(ref_model.named_parameters())
    muon = torch.optim.Muon(
        [p for n, p in named if n in hidden], lr=2e-3, weight_decay=0.1, momentum=0.9, adjust_lr_fn="match_rms_adamw"
    )
    adamw = torch.optim.AdamW(
        [
            {"params": [p for n, p in named if n not in hidden and p.dim() >= 2], "weight_decay": 0.1},
            {"params": [p for n, p in named if p.dim() < 2], "weight_decay": 0.0},
        ],
        lr=2e-3,
        betas=(0.9, 0.95),
        fused=True,
    )
    both = type("Both", (), {"zero_grad": lambda s: [muon.zero_grad(), adamw.zero_grad()]})()
    both.step = lambda: [muon.step(), adamw.step()]
    before = copy.deepcopy(model.state_dict())
    train_steps(model, ours, 3)
    train_steps(ref_model, both, 3)
    for (name, p), (_, q) in zip(model.named_parameters(), ref_model.named_parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=name)
        assert not torch.equal(p, before[name]), name  # every tensor trained


def newton_schulz_reference(g: torch.Tensor, steps: int = 5, coefficients=(3.4445, -4.775, 2.0315)) -> torch.Tensor:
    """Muon's quintic Newton-Schulz iteration written out for one matrix, in float64."""
    a, b, c = coefficients
    x = g.double()
    tall = x.shape[0] > x.shape[1]
    x = x.T if tall else x
    x = x / x.norm().clamp(min=1e-7)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return (x.T if tall else x).float()


def test_batched_muon_steps_equal_muons_formula_per_matrix():
    """Three steps of the batched Muon (float32 Newton-Schulz over stacked same-shape matrices) equal, for every
    matrix, Muon's update written out per matrix in float64: nesterov momentum, decoupled decay, the
    match_rms_adamw lr. Shapes: wide, tall and square, two of each so that stacking happens."""
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(*shape)) for shape in [(8, 24), (8, 24), (24, 8), (24, 8), (16, 16)]]
    reference = [p.detach().double().clone() for p in params]
    buffers = [torch.zeros_like(r) for r in reference]
    opt = BatchedMuon(
        params, lr=0.02, weight_decay=0.1, momentum=0.9, adjust_lr_fn="match_rms_adamw", ns_dtype="float32"
    )
    for step in range(3):
        seeds = [torch.Generator().manual_seed(10 * step + i) for i in range(len(params))]
        grads = [torch.randn(p.shape, generator=g) for p, g in zip(params, seeds)]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        opt.step()
        for r, buf, g in zip(reference, buffers, grads):
            buf.lerp_(g.double(), 1 - 0.9)
            update = newton_schulz_reference(g.double().lerp(buf, 0.9)).double()
            r.mul_(1 - 0.02 * 0.1).add_(update, alpha=-0.02 * 0.2 * max(r.shape) ** 0.5)
    for p, r in zip(params, reference):
        torch.testing.assert_close(p.detach().double(), r, rtol=1e-5, atol=1e-5)


def test_batched_muon_in_bfloat16_where_native_and_float32_where_not(monkeypatch):
    """ns_dtype auto follows zoo.core.hardware.native_bf16; the bf16 iteration stays within bf16 rounding of the
    float64 formula."""
    from zoo.core import hardware

    g = torch.randn(24, 8, generator=torch.Generator().manual_seed(3))
    monkeypatch.setattr(hardware, "cpu_flags", lambda: {"avx2", "fma"})  # AVX2 only (e.g. AMD Zen 3)
    assert BatchedMuon([torch.nn.Parameter(g.clone())])._dtype(torch.device("cpu")) == torch.float32
    monkeypatch.setattr(hardware, "cpu_flags", lambda: {"avx512f", "amx_bf16"})
    opt = BatchedMuon([torch.nn.Parameter(g.clone())])
    assert opt._dtype(torch.device("cpu")) == torch.bfloat16
    (update,) = opt._orthogonalize([g], opt.param_groups[0])
    torch.testing.assert_close(update, newton_schulz_reference(g), rtol=0, atol=3e-2)


def test_batched_muon_keeps_torch_muons_state_so_either_resumes_the_other():
    model = small_gpt()
    batched = MuonWithAdamW(param_groups(model, 0.1), model=model, **OPTIONS)
    train_steps(model, batched, 2)
    state = batched.state_dict()
    assert isinstance(batched.muon, BatchedMuon)
    plain = MuonWithAdamW(param_groups(model, 0.1), model=model, muon_impl="torch", **OPTIONS)
    plain.load_state_dict(state)
    buffers = [plain.muon.state[p]["momentum_buffer"] for g in plain.muon.param_groups for p in g["params"]]
    assert buffers and all(b.abs().sum() > 0 for b in buffers)
    train_steps(model, plain, 1)  # and it steps on from there
    with pytest.raises(ValueError, match="muon_impl must be one of batched, torch"):
        MuonWithAdamW(param_groups(model, 0.1), model=model, muon_impl="fast")
    with pytest.raises(ValueError, match="ns_dtype must be auto, float32 or bfloat16"):
        MuonWithAdamW(param_groups(model, 0.1), model=model, ns_dtype="half")


def test_a_lambda_lr_scheduler_scales_both_inner_optimizers():
    model = small_gpt()
    opt = MuonWithAdamW(param_groups(model, 0.1), model=model, lr=1e-3, muon_lr=2e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.5**step)
    train_steps(model, opt, 3, scheduler)
    assert [g["lr"] for g in opt.muon.param_groups] == pytest.approx([2e-2 * 0.5**3], rel=1e-12)
    assert [g["lr"] for g in opt.adamw.param_groups] == pytest.approx([1e-3 * 0.5**3] * 2, rel=1e-12)


def test_resume_from_a_state_dict_equals_an_uninterrupted_run():
    def fresh(model):
        opt = MuonWithAdamW(param_groups(model, 0.1), model=model, **OPTIONS)
        return opt, warmup_stable_decay(opt, warmup_steps=2, max_steps=8, decay_fraction=0.5)

    straight = small_gpt()
    opt, sched = fresh(straight)
    train_steps(straight, opt, 6, sched)

    first = small_gpt()
    opt, sched = fresh(first)
    train_steps(first, opt, 3, sched)
    buffer = io.BytesIO()
    torch.save({"model": first.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)  # as Lightning reads a checkpoint
    resumed = GPT.from_preset("gpt-nano", vocab_size=40, block_size=16)
    resumed.load_state_dict(saved["model"])
    opt, sched = fresh(resumed)
    opt.load_state_dict(saved["opt"])
    sched.load_state_dict(saved["sched"])
    assert all(a is b for a, b in zip(opt.param_groups, opt.muon.param_groups + opt.adamw.param_groups, strict=True))
    train_steps(resumed, opt, 3, sched, first=3)
    for (name, p), (_, q) in zip(resumed.named_parameters(), straight.named_parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=name)


def test_bad_options_give_one_line_errors():
    model = small_gpt()
    groups = param_groups(model, 0.1)
    with pytest.raises(ValueError, match=r"^MuonWithAdamW found no block matrices .* of Sequential; use") as info:
        plain = torch.nn.Sequential(torch.nn.Linear(3, 3))
        MuonWithAdamW(plain.parameters(), model=plain)
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="adjust_lr_fn must be one of match_rms_adamw, original, .* got 'rms'"):
        MuonWithAdamW(groups, model=model, adjust_lr_fn="rms")
    with pytest.raises(ValueError, match="needs model="):
        MuonWithAdamW(groups)
    with pytest.raises(ValueError, match=r"muon_momentum must be in \[0, 1\), got 1.5"):
        MuonWithAdamW(groups, model=model, muon_momentum=1.5)
    with pytest.raises(ValueError, match="ns_steps must be an integer"):
        MuonWithAdamW(groups, model=model, ns_steps=0)


def test_build_optimizer_gives_the_model_and_swaps_fused_where_lightning_refuses_it(tmp_path):
    model = small_gpt()
    trainer = L.Trainer(precision="bf16-mixed", gradient_clip_val=1.0, logger=False, default_root_dir=tmp_path)
    opt = build_optimizer(partial(MuonWithAdamW, lr=1e-3, fused=True), param_groups(model, 0.1), trainer, model)
    assert type(opt) is MuonWithAdamW and opt.adamw.defaults["fused"] is False
    # Optimizers that take no model are called as before.
    assert (
        type(build_optimizer(partial(torch.optim.AdamW, lr=1e-3), model.parameters(), None, model)) is torch.optim.AdamW
    )


def test_gpt_task_trains_with_muon_and_wsd_through_the_config(tmp_path):
    """The shipped GPT config with both levers switched on by overrides, a real short fit on tiny shakespeare,
    then the checkpoint's recorded optimizer and scheduler rebuild."""
    cfg = compose_train(
        tmp_path,
        [
            "model=gpt",
            "model.net.name=gpt-nano",
            "data.block_size=32",
            "data.batch_size=4",
            "model.optimizer._target_=zoo.optim.muon.MuonWithAdamW",
            "model.optimizer.betas=[0.9,0.95]",
            "+model.optimizer.muon_momentum=0.95",
            "+model.optimizer.adjust_lr_fn=match_rms_adamw",
            "model.scheduler._target_=zoo.optim.schedules.warmup_stable_decay",
            "model.scheduler.warmup_steps=1",
            "model.scheduler.max_steps=5",
            "+model.scheduler.decay_fraction=0.4",
        ],
    )
    datamodule = hydra.utils.instantiate(cfg.data, _convert_="all")
    torch.manual_seed(0)
    net = hydra.utils.instantiate(build_model_config(cfg.model.net, datamodule), _convert_="all")
    task = hydra.utils.instantiate(cfg.model, net=net, **task_inputs(datamodule), _convert_="all")
    losses = []

    class Record(L.Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            losses.append(float(outputs["loss"]))

    trainer = L.Trainer(
        max_steps=5,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        gradient_clip_val=1.0,
        log_every_n_steps=1,
        logger=CSVLogger(tmp_path, name="csv", version=""),
        callbacks=[Record(), LearningRateMonitor(logging_interval="step")],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        default_root_dir=tmp_path,
    )
    trainer.fit(task, datamodule=datamodule)
    opt = trainer.optimizers[0]
    assert type(opt) is MuonWithAdamW and len(losses) == 5 and all(math.isfinite(x) for x in losses)
    # After 5 steps the schedule sits at min_lr_ratio (0.1, the config's) x lr, in both optimizers.
    lr = cfg.model.optimizer.lr
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.1 * lr] * 3, rel=1e-9)
    # LearningRateMonitor sees every group: warm-up 1/2, peak, peak, decay over the last 2 steps.
    with open(tmp_path / "csv" / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("lr-MuonWithAdamW/pg1")]
    for pg in ("pg1", "pg2", "pg3"):
        logged = [float(r[f"lr-MuonWithAdamW/{pg}"]) for r in rows]
        assert logged == pytest.approx([lr * f for f in (0.5, 1.0, 1.0, 1.0, 0.55)], rel=1e-6), pg
    trainer.save_checkpoint(tmp_path / "last.ckpt")
    loaded = ZooTask.load_from_checkpoint(tmp_path / "last.ckpt")
    config = loaded.configure_optimizers()
    assert type(config["optimizer"]) is MuonWithAdamW
    config["optimizer"].load_state_dict(torch.load(tmp_path / "last.ckpt", weights_only=True)["optimizer_states"][0])


def wsd_reference(step: int, warmup: int, max_steps: int, decay_steps: int, min_ratio: float) -> float:
    """The WSD factor as the papers draw it, one phase at a time."""
    if step < warmup:
        return (step + 1) / (warmup + 1)
    if step < max_steps - decay_steps:
        return 1.0
    if step <= max_steps:
        return 1.0 - (1.0 - min_ratio) * (step - (max_steps - decay_steps)) / decay_steps
    return min_ratio


@pytest.mark.parametrize(
    "warmup, max_steps, fraction, min_ratio, decay_steps",
    [(3, 20, 0.25, 0.1, 5), (0, 10, 0.2, 0.0, 2), (2, 7, 1.0, 0.5, 7), (4, 30, 0.1, 0.0, 3)],
)
def test_wsd_follows_the_formula_at_every_step(warmup, max_steps, fraction, min_ratio, decay_steps):
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=0.5)
    scheduler = warmup_stable_decay(
        opt, warmup_steps=warmup, max_steps=max_steps, decay_fraction=fraction, min_lr_ratio=min_ratio
    )
    for step in range(max_steps + 4):
        expected = 0.5 * wsd_reference(step, warmup, max_steps, decay_steps, min_ratio)
        assert opt.param_groups[0]["lr"] == pytest.approx(expected, rel=1e-12, abs=1e-15), step
        opt.step()
        scheduler.step()


def test_wsd_warm_up_running_into_the_decay_takes_the_lower_factor():
    """A smoke run shorter than the warm-up: 5 steps, warm-up 4, decay over the last 2."""
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = warmup_stable_decay(opt, warmup_steps=4, max_steps=5, decay_fraction=0.4, min_lr_ratio=0.1)
    seen = []
    for _ in range(6):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        scheduler.step()
    assert seen == pytest.approx([0.2, 0.4, 0.6, 0.8, 0.55, 0.1], rel=1e-12)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(warmup_steps=-1), r"model.scheduler.warmup_steps must be >= 0, got -1"),
        (dict(max_steps=0), r"model.scheduler.max_steps .* must be > 0, got 0"),
        (dict(decay_fraction=0.0), r"model.scheduler.decay_fraction must be in \(0, 1\], got 0.0"),
        (dict(decay_fraction=1.5), r"model.scheduler.decay_fraction must be in \(0, 1\], got 1.5"),
        (dict(min_lr_ratio=2.0), r"model.scheduler.min_lr_ratio must be in \[0, 1\], got 2.0"),
    ],
)
def test_wsd_rejects_bad_arguments(kwargs, message):
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(ValueError, match=message):
        warmup_stable_decay(opt, **{"warmup_steps": 2, "max_steps": 10, **kwargs})


def _lrs(scheduler, optimizer, steps: int) -> list[float]:
    lrs = []
    for _ in range(steps):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return lrs


def test_a_restarted_schedule_runs_the_schedule_twice_with_its_own_max_steps():
    """Steps 0..5 follow a 6-step cosine, steps 6..9 a fresh 4-step one (warm-up again), as two runs would."""
    factory = partial(warmup_cosine, warmup_steps=2, max_steps=10, min_lr_ratio=0.0)

    def fresh():
        return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)

    first, second, restarted = fresh(), fresh(), fresh()
    expected = _lrs(warmup_cosine(first, warmup_steps=2, max_steps=6, min_lr_ratio=0.0), first, 6)
    expected += _lrs(warmup_cosine(second, warmup_steps=2, max_steps=4, min_lr_ratio=0.0), second, 4)
    got = _lrs(restarted_schedule(factory, restarted, 6, what="model.mlm_steps"), restarted, 10)
    assert got == pytest.approx(expected, abs=1e-12)
    assert got[6] == got[0] and got[5] < got[4]  # the restart begins its warm-up as the run began


@pytest.mark.parametrize("restart", [0, 10, 12])
def test_a_restart_outside_the_schedule_is_named(restart):
    factory = partial(warmup_cosine, warmup_steps=2, max_steps=10)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(ValueError, match=r"model.mlm_steps \(\d+\) must be between 0 and the schedule's max_steps"):
        restarted_schedule(factory, optimizer, restart, what="model.mlm_steps")


def test_block_types_let_muon_take_the_block_matrices_of_a_network_built_elsewhere():
    """timm's ViT: its blocks are not zoo's, so Muon finds nothing unless told timm's block class (by dotted path,
    as YAML gives it); then it takes exactly each block's qkv, projection and feed-forward weights."""
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    model = VisionTransformer(img_size=8, patch_size=4, in_chans=1, num_classes=3, embed_dim=16, depth=2, num_heads=2)
    groups = param_groups(model, 0.1)
    with pytest.raises(ValueError, match=r"no block matrices \(nn.Linear weights inside zoo.core.block.Block\)"):
        MuonWithAdamW(groups, model=model)
    opt = MuonWithAdamW(groups, model=model, block_types=["timm.models.vision_transformer.Block"])
    expected = {
        f"blocks.{i}.{layer}.weight" for i in range(2) for layer in ("attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2")
    }
    assert set(names_in(model, opt.muon.param_groups)) == expected
    assert not expected & set(names_in(model, opt.adamw.param_groups))
    for bad in (["timm.models.vision_transformer.Nothing"], ["no_such_module.Block"], ["torch.zeros"]):
        with pytest.raises(ValueError, match=r"^model.optimizer.block_types: .* is not an importable nn.Module class"):
            MuonWithAdamW(groups, model=model, block_types=bad)
    with pytest.raises(ValueError, match="must be a non-empty list of block classes"):
        MuonWithAdamW(groups, model=model, block_types="timm.models.vision_transformer.Block")
