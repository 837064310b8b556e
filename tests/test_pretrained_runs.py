"""Runs that start from published weights (issue 23, item 5): `model.pretrained=` for GPT (a Hugging Face GPT-2
directory, or a zoo checkpoint) and ViT (timm / torchvision / Hugging Face files), with the data's tokenizer following
the model. Nothing is downloaded: tiny models are built here with `transformers` and saved as transformers saves them.

The first training loss of a run equals the loss that transformers computes with the same weights on the same first
batch; a resumed run reads its network and tokenizer from its checkpoint, not from the pretrained directory."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import hydra
import lightning as L
import pytest
import torch
from safetensors.torch import save_file
from trained import train_in_process

from zoo.data import LanguageModelDataModule
from zoo.data.tokenizer import BPETokenizer, load_published_tokenizer
from zoo.entry.builders import build_model_config, task_inputs
from zoo.entry.config_checks import check_config
from zoo.entry.errors import user_message
from zoo.models import GPT, ViT
from zoo.tasks import CausalLMTask, ImageClassificationTask

from conftest import QUIET_SHORT_RUN

transformers = pytest.importorskip("transformers")

TEXT_CHARS = 30_000  # of tiny shakespeare: enough for a small BPE and a few hundred windows
VOCAB = 300


def tiny_gpt2(directory: Path, text: str, *, n_positions: int = 64, vocab_files: bool = False, seed: int = 0):
    """A random GPT-2 (2 layers, 32 wide) saved by transformers, with a byte-level BPE trained on `text` beside it:
    tokenizer.json, or vocab.json + merges.txt (`vocab_files`). Returns the transformers model."""
    tokenizer = BPETokenizer.train(text, VOCAB)
    directory.mkdir(parents=True, exist_ok=True)
    if vocab_files:
        tokenizer.tokenizer.model.save(str(directory))
    else:
        tokenizer.tokenizer.save(str(directory / "tokenizer.json"))
    eos = tokenizer.eos_id
    config = transformers.GPT2Config(
        n_layer=2,
        n_embd=32,
        n_head=2,
        n_positions=n_positions,
        vocab_size=tokenizer.vocab_size,
        bos_token_id=eos,
        eos_token_id=eos,
    )
    torch.manual_seed(seed)
    model = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():  # transformers zero-initializes biases; random ones are compared for real
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.normal_(0.0, 0.2)
    model.save_pretrained(directory)
    return model


def tiny_vit(directory: Path, *, num_labels: int = 5, image_size: int = 28, seed: int = 0):
    """A random Hugging Face ViTForImageClassification for RGB images (patch 4, 2 layers, 32 wide)."""
    config = transformers.ViTConfig(
        image_size=image_size,
        patch_size=4,
        num_channels=3,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=num_labels,
    )
    torch.manual_seed(seed)
    model = transformers.ViTForImageClassification(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias") or "token" in name:
                param.normal_(0.0, 0.2)
    model.save_pretrained(directory)
    return model


def compose(overrides: list[str]):
    from test_configs import compose_train  # the configs as train.py composes them

    return compose_train(Path.cwd(), overrides)


def first_loss(run_dir: Path) -> float:
    with open(run_dir / "csv" / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("train/loss")]
    return float(min(rows, key=lambda r: int(r["step"]))["train/loss"])


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, shakespeare_path) -> Path:
    path = tmp_path_factory.mktemp("text") / "shakespeare.txt"
    path.write_text(shakespeare_path.read_text(encoding="utf-8")[:TEXT_CHARS], encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory, corpus) -> Path:
    directory = tmp_path_factory.mktemp("gpt2")
    tiny_gpt2(directory, corpus.read_text(encoding="utf-8"))
    return directory


def lm_data(corpus, **options) -> LanguageModelDataModule:
    options = {"dataset": None, "text_files": [str(corpus)], "block_size": 32, "batch_size": 4, **options}
    dm = LanguageModelDataModule(**options)
    dm.setup("fit")
    return dm


# ---- the data: the model's own tokenizer --------------------------------------------------------------------------
def test_the_data_takes_the_models_tokenizer_and_caches_it_apart(corpus, gpt2_dir, tmp_path):
    text = corpus.read_text(encoding="utf-8")
    published = load_published_tokenizer(gpt2_dir)
    trained = lm_data(corpus, tokenizer="bpe", bpe_vocab_size=VOCAB)
    following = lm_data(corpus, tokenizer="bpe", bpe_vocab_size=VOCAB, pretrained=str(gpt2_dir))
    # The same kind and size of tokenizer, trained on the same text, is still not reused: the cache key is the
    # tokenizer's JSON.
    assert following._cache_folder() != trained._cache_folder()
    assert following.tokenizer.tokenizer.get_vocab() == published.tokenizer.get_vocab()
    cut = int(len(text) * 0.9)
    assert following.tokens("train").tolist() == published.encode(text[:cut])
    # vocab.json + merges.txt, given as data.tokenizer: the same ids, its own cache entry.
    files = tmp_path / "files"
    tiny_gpt2(files, text, vocab_files=True)
    assert {"vocab.json", "merges.txt"} <= {p.name for p in files.iterdir()}
    from_files = lm_data(corpus, tokenizer=str(files))
    assert from_files.tokens("train").tolist() == following.tokens("train").tolist()
    assert from_files._cache_folder() not in (following._cache_folder(), trained._cache_folder())
    # A path in data.tokenizer wins over data.pretrained.
    assert lm_data(corpus, tokenizer=str(files), pretrained=str(gpt2_dir))._cache_folder() == from_files._cache_folder()


def test_bad_tokenizer_sources_are_one_line_errors(corpus, gpt2_dir, tmp_path):
    with pytest.raises(ValueError, match="unknown tokenizer 'nowhere.json': give char or bpe") as info:
        LanguageModelDataModule(dataset=None, text_files=[str(corpus)], tokenizer="nowhere.json")
    assert "\n" not in str(info.value)
    bare = tmp_path / "bare"  # weights and config, no tokenizer
    bare.mkdir()
    shutil.copy(gpt2_dir / "config.json", bare)
    with pytest.raises(FileNotFoundError, match="holds no tokenizer .* data.tokenizer=<its tokenizer.json"):
        lm_data(corpus, pretrained=str(bare))
    with pytest.raises(FileNotFoundError, match="check model.pretrained"):
        lm_data(corpus, pretrained=str(tmp_path / "missing"))


# ---- the GPT task ----------------------------------------------------------------------------------------------
def gpt_net(vocab_size: int, block_size: int = 32, **sizes) -> GPT:
    return GPT.from_preset("gpt-mini", vocab_size=vocab_size, block_size=block_size, dropout=0.0, **sizes)


def test_a_disagreeing_size_in_model_net_is_refused_in_one_line(corpus, gpt2_dir):
    dm = lm_data(corpus, pretrained=str(gpt2_dir))
    task = CausalLMTask(gpt_net(VOCAB), pretrained=str(gpt2_dir), tokenizer=dm.tokenizer, num_samples=0)
    assert (task.net.config.n_layer, task.net.config.n_embd, task.net.config.block_size) == (2, 32, 64)
    with pytest.raises(ValueError) as info:
        CausalLMTask(gpt_net(VOCAB, n_layer=4, n_head=2), pretrained=str(gpt2_dir), tokenizer=dm.tokenizer)
    line = user_message(info.value)
    assert "\n" not in line and "model.net sets n_layer=4 but the pretrained GPT" in line and "n_layer=2" in line
    assert "n_head" not in line  # n_head=2 agrees with the model
    with pytest.raises(ValueError, match=r"block_size=128 \(data.block_size\) is longer than the 64 positions"):
        CausalLMTask(gpt_net(VOCAB, block_size=128), pretrained=str(gpt2_dir), tokenizer=dm.tokenizer)


def test_bad_pretrained_paths_are_one_line_errors(corpus, gpt2_dir, tmp_path):
    dm = lm_data(corpus, pretrained=str(gpt2_dir))
    net = gpt_net(VOCAB)
    cases = {
        tmp_path / "missing": "pretrained model not found",
        tmp_path / "empty": "model.pretrained=",  # neither a Hugging Face directory nor a checkpoint
        tmp_path / "bert": "holds a BERT, not a GPT",
    }
    (tmp_path / "empty").mkdir()
    from zoo.interop import save_hf
    from zoo.models import BERT

    save_hf(BERT.from_preset("bert-tiny", vocab_size=VOCAB), tmp_path / "bert")
    for path, fragment in cases.items():
        with pytest.raises((ValueError, FileNotFoundError)) as info:
            CausalLMTask(net, pretrained=str(path), tokenizer=dm.tokenizer)
        assert fragment in str(info.value) and "\n" not in str(info.value)
        assert "model.pretrained" in str(info.value)
    other = BPETokenizer.train(corpus.read_text(encoding="utf-8"), VOCAB - 20)
    with pytest.raises(ValueError, match=r"the data's tokenizer \(280 tokens\) is not the tokenizer of the pretrained"):
        CausalLMTask(gpt_net(other.vocab_size), pretrained=str(gpt2_dir), tokenizer=other)
    # A directory without a tokenizer: the size is what can be checked.
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(gpt2_dir / name, bare)
    with pytest.raises(ValueError, match="has 280 tokens but the pretrained model .* has vocab_size=300"):
        CausalLMTask(gpt_net(other.vocab_size), pretrained=str(bare), tokenizer=other)


def saved(task, path: Path) -> Path:
    """The checkpoint a task writes (its "zoo" section, hyper-parameters and checksum), without a fit."""
    checkpoint = {"state_dict": task.state_dict(), "hyper_parameters": dict(task.hparams)}
    task.on_save_checkpoint(checkpoint)
    torch.save(checkpoint, path)
    return path


def test_a_zoo_checkpoint_is_a_pretrained_model_and_load_from_checkpoint_does_not_reread(corpus, gpt2_dir, tmp_path):
    moved = tmp_path / "moved"
    shutil.copytree(gpt2_dir, moved)
    dm = lm_data(corpus, pretrained=str(moved))
    task = CausalLMTask(gpt_net(VOCAB), pretrained=str(moved), tokenizer=dm.tokenizer, num_samples=0)
    ckpt = saved(task, tmp_path / "gpt.ckpt")
    shutil.rmtree(moved)
    loaded = CausalLMTask.load_from_checkpoint(ckpt)  # the network from the checkpoint, not from `moved`
    # The checkpoint as a pretrained model, its stored tokenizer as the data's.
    stored = lm_data(corpus, pretrained=str(ckpt)).tokenizer
    again = CausalLMTask(gpt_net(VOCAB), pretrained=str(ckpt), tokenizer=stored, num_samples=0)
    for name, tensor in task.net.state_dict().items():
        assert torch.equal(loaded.net.state_dict()[name], tensor), name
        assert torch.equal(again.net.state_dict()[name], tensor), name


# ---- end to end: train.py ----------------------------------------------------------------------------------------
def gpt_overrides(pretrained, corpus) -> list[str]:
    return [
        "model=gpt",
        f"model.pretrained={pretrained}",
        "data=text_files",
        f"data.text_files=[{corpus}]",
        "data.block_size=32",
        "data.batch_size=4",
    ]


def test_the_finetune_recipe_asks_for_its_directory():
    """experiment=gpt2_finetune (composed with a directory by tests/test_configs.py) without one: one line."""
    cfg = compose(["experiment=gpt2_finetune"])
    assert cfg.model.optimizer.lr == 3e-5 and cfg.data.block_size == 256 and cfg.trainer.max_steps == 300
    with pytest.raises(ValueError) as info:
        check_config(cfg)  # the first thing train.py does
    assert user_message(info.value) == (
        "model.pretrained has no value, and gpt2_finetune needs one; give it on the command line: model.pretrained=..."
    )


@pytest.fixture(scope="module")
def gpt_run(tmp_path_factory, gpt2_dir, corpus):
    """One step of the train entry (in this process: tests/trained.py) from a copy of the GPT-2 directory (the resume
    test deletes the copy)."""
    root = tmp_path_factory.mktemp("gpt_run")
    copy, run_dir = root / "gpt2", root / "run"
    shutil.copytree(gpt2_dir, copy)
    result = train_in_process(
        *gpt_overrides(copy, corpus),
        *QUIET_SHORT_RUN,
        "trainer.max_steps=1",
        "trainer.log_every_n_steps=1",
        "optimized_metric=null",
        f"hydra.run.dir={run_dir}",
        cwd=root,
    )
    return copy, run_dir, result.stdout + result.stderr


def test_the_first_loss_of_a_run_is_the_loss_of_transformers_model(gpt_run, gpt2_dir, corpus):
    copy, run_dir, output = gpt_run
    assert f"GPT loaded from {copy}" in output and f"tokenizer of {copy}" in output
    # The first batch, as the run's data draws it (the configs as train.py composes them; the same tokenizer).
    cfg = compose(gpt_overrides(gpt2_dir, corpus))
    dm = hydra.utils.instantiate(cfg.data, _convert_="all")
    dm.setup("fit")
    idx, targets = next(iter(dm.train_dataloader()))
    window = torch.cat([idx, targets[:, -1:]], dim=1)  # transformers shifts the labels itself
    hf = transformers.GPT2LMHeadModel.from_pretrained(gpt2_dir).eval()
    with torch.no_grad():
        expected = hf(input_ids=window, labels=window).loss.item()
    measured = first_loss(run_dir)
    print(f"first loss: run {measured:.7f}, transformers {expected:.7f}, |diff| {abs(measured - expected):.2e}")
    assert measured == pytest.approx(expected, abs=1e-5)


def test_a_resumed_run_does_not_read_the_pretrained_directory_again(gpt_run, corpus, tmp_path):
    copy, run_dir, _ = gpt_run
    shutil.rmtree(copy)
    resumed = tmp_path / "resumed"
    result = train_in_process(
        *gpt_overrides(copy, corpus),
        *QUIET_SHORT_RUN,
        "trainer.max_steps=2",
        "trainer.log_every_n_steps=1",
        "optimized_metric=null",
        f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}",
        f"hydra.run.dir={resumed}",
    )
    assert "is not read again" in result.stdout + result.stderr
    first = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    second = torch.load(resumed / "checkpoints" / "last.ckpt", weights_only=True)
    assert second["global_step"] == 2 and second["zoo"]["tokenizer"] == first["zoo"]["tokenizer"]
    assert second["hyper_parameters"]["pretrained"] == str(copy)  # what the run started from, still recorded


# ---- ViT -----------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def vit_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("vit")
    tiny_vit(directory)
    return directory


VIT_RUN = [
    "model=vit",
    "data.batch_size=8",
    "data.crop_padding=0",  # no random crop: the first batch is the images themselves
    "model.label_smoothing=0.0",  # transformers' loss is the plain cross-entropy
    "model.log_images=false",
]


def data_vit(**fields) -> ViT:
    """The network the entry builds for 28-px RGB data of 10 classes (plus `fields` given in model.net)."""
    return ViT.from_preset("vit-nano/4", **{"image_size": 28, "in_channels": 3, "num_classes": 10, **fields})


def test_a_timm_file_at_another_image_size_and_layer_decay(tmp_path):
    """A timm state dict at 32 px for 28-px data: positions resampled as load_vit resamples them, the 1000-class
    head replaced by a new one of 10, and layer-wise lr decay groups over the pretrained depth."""
    from zoo.interop.vit import load_vit

    timm_like = ViT.from_preset("vit-nano/4", num_classes=1000, in_channels=3)
    save_file(timm_vit_state(timm_like), tmp_path / "vit.safetensors")
    with pytest.raises(ValueError, match=r"cannot tell the number of attention heads .* model.net.num_heads"):
        ImageClassificationTask(data_vit(), pretrained=str(tmp_path / "vit.safetensors"))
    # A width no published ViT has: its head count comes from model.net.
    net = data_vit(num_heads=4)
    task = ImageClassificationTask(net, pretrained=str(tmp_path / "vit.safetensors"), layer_decay=0.75)
    reference = load_vit(tmp_path / "vit.safetensors", image_size=28, num_heads=4)
    assert torch.equal(task.net.pos_emb.weight, reference.pos_emb.weight)
    assert task.net.head.weight.shape == (10, 64) and task.net.config.image_size == 28
    scales = sorted({g["lr_scale"] for g in task.param_groups()})
    assert len(scales) == timm_like.config.depth + 2 and scales[-1] == 1.0
    with pytest.raises(ValueError, match="model.net sets depth=2 but the pretrained ViT .* has depth=4"):
        ImageClassificationTask(
            data_vit(num_heads=4, depth=2),
            pretrained=str(tmp_path / "vit.safetensors"),
        )
    with pytest.raises(ValueError, match="takes 3-channel images but the data has 2 channels"):
        ImageClassificationTask(
            data_vit(num_heads=4, in_channels=2),
            pretrained=str(tmp_path / "vit.safetensors"),
        )
    coarse = ViT.from_preset("vit-nano/4", num_classes=1000, in_channels=3, patch_size=8)
    save_file(timm_vit_state(coarse), tmp_path / "coarse.safetensors")
    with pytest.raises(ValueError, match=r"28-px images do not tile into the 8-px patches .* data.image_size=32"):
        ImageClassificationTask(data_vit(num_heads=4), pretrained=str(tmp_path / "coarse.safetensors"))


def timm_vit_state(model: ViT) -> dict[str, torch.Tensor]:
    """zoo's ViT as timm names it (the inverse of zoo.interop.vit's mapping)."""
    from zoo.interop.names import rename_back
    from zoo.interop.vit import _TIMM

    state = model.state_dict()
    out = rename_back(state | {"pos_emb.weight": state["pos_emb.weight"][None]}, _TIMM)
    return {k: v.contiguous() for k, v in out.items()}


def test_a_vit_run_on_mnist_starts_from_a_hugging_face_vit_with_a_new_head(vit_dir, data_dir, tmp_path):
    """An RGB ViT of 5 classes on MNIST (1 channel, 10 classes): the patch kernels summed over RGB, a new head;
    the first loss is transformers' loss with that head on the grey images fed as RGB."""
    run_dir = tmp_path / "run"
    quiet = [o for o in QUIET_SHORT_RUN if not o.startswith("model.num_samples")]
    result = train_in_process(
        *VIT_RUN,
        f"model.pretrained={vit_dir}",
        *quiet,
        "trainer.max_steps=1",
        "trainer.log_every_n_steps=1",
        "optimized_metric=null",
        f"hydra.run.dir={run_dir}",
    )
    output = result.stdout + result.stderr
    assert "patch embedding summed over its RGB channels" in output
    assert "newly initialized: head.weight, head.bias" in output
    # The task as the entry builds it (same seed, same order: the same new head), and the run's first batch.
    cfg = compose([*VIT_RUN, f"model.pretrained={vit_dir}"])
    L.seed_everything(cfg.seed, workers=True)
    dm = hydra.utils.instantiate(cfg.data, _convert_="all")
    net = hydra.utils.instantiate(build_model_config(cfg.model.net, dm), _convert_="all")
    task = hydra.utils.instantiate(cfg.model, net=net, **task_inputs(dm), _convert_="all")
    dm.setup("fit")
    images, labels = next(iter(dm.train_dataloader()))
    assert images.shape[1] == 1 and task.net.head.out_features == 10
    # Independently: transformers' model with its classifier swapped for the new head, on the images as RGB.
    source = transformers.ViTForImageClassification.from_pretrained(vit_dir)
    config = source.config
    config.num_labels = 10
    config.id2label, config.label2id = {i: str(i) for i in range(10)}, {str(i): i for i in range(10)}
    hf = transformers.ViTForImageClassification(config).eval()
    body = {k: v for k, v in source.state_dict().items() if not k.startswith("classifier.")}
    hf.load_state_dict({**body, "classifier.weight": task.net.head.weight, "classifier.bias": task.net.head.bias})
    with torch.no_grad():
        expected = hf(pixel_values=images.repeat(1, 3, 1, 1), labels=labels).loss.item()
    measured = first_loss(run_dir)
    print(f"ViT first loss: run {measured:.7f}, transformers {expected:.7f}, |diff| {abs(measured - expected):.2e}")
    assert measured == pytest.approx(expected, abs=1e-5)
    assert json.loads(json.dumps(task.hparams["pretrained"])) == str(vit_dir)
