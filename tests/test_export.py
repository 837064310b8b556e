"""zoo-export: real checkpoints (the session's short runs of each task on real data, tests/trained.py, and a 2-step
fit of a ViT that has a Hugging Face class) exported and loaded with `transformers` (AutoModel*, AutoTokenizer,
AutoImageProcessor, pipelines) give zoo's logits, token ids and labels; zoo's own format round-trips exactly; bad
inputs stop with one line."""

from __future__ import annotations

import json
import math
import os
from functools import partial
from pathlib import Path

import lightning as L
import pytest
import tokenizers
import torch
from PIL import Image

transformers = pytest.importorskip("transformers")

from zoo.checkpointing.reading import load_model_from_checkpoint  # noqa: E402
from zoo.data import (  # noqa: E402  # noqa: E402
    ImageClassificationDataModule,
    resolve_dataset,
    tokenizer_from_json,
)
from zoo.data.image_sources import load_mnist  # noqa: E402
from zoo.entry.export import main as export_main  # noqa: E402
from zoo.models import GPT, Transformer, ViT, ZooModel  # noqa: E402
from zoo.tasks import (  # noqa: E402
    CausalLMTask,
    ImageClassificationTask,
    Seq2SeqTask,
)

from conftest import run_module  # noqa: E402

TOL = dict(atol=1e-5, rtol=1e-5)
DATA = lambda *parts: os.path.join(os.environ["ZOO_DATA_DIR"], *parts)  # noqa: E731


def fit_and_save(task: L.LightningModule, datamodule: L.LightningDataModule, path) -> str:
    """Two optimizer steps, then the checkpoint Lightning writes (the task's own on_save_checkpoint)."""
    trainer = L.Trainer(
        max_steps=2,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
    )
    trainer.fit(task, datamodule=datamodule)
    trainer.save_checkpoint(path)
    return str(path)


def adamw():
    return partial(torch.optim.AdamW, lr=1e-3)


def export(ckpt: str, directory, *extra: str) -> None:
    export_main([ckpt, str(directory), *extra])


def shakespeare_val(n_chars: int = 1500) -> str:
    """The end of tiny shakespeare (the validation part of nanoGPT's split)."""
    (path,) = resolve_dataset("tinyshakespeare", os.environ["ZOO_DATA_DIR"], cache_dir=os.environ["ZOO_CACHE_DIR"])
    return path.read_text(encoding="utf-8")[-n_chars:]


# ---- checkpoints -----------------------------------------------------------------------------------------------
# gpt_char_ckpt and gpt_bpe_ckpt: session fixtures (tests/trained.py).
@pytest.fixture(scope="module")
def bert_pretraining_ckpt(bert_mlm_run) -> str:
    return str(bert_mlm_run / "checkpoints" / "last.ckpt")


@pytest.fixture(scope="module")
def sst2_ckpt(sst2_run) -> str:
    return str(sst2_run / "checkpoints" / "last.ckpt")


@pytest.fixture(scope="module")
def mnist(tmp_path_factory):
    torch.manual_seed(0)
    dm = ImageClassificationDataModule(dataset="mnist", batch_size=16, split_sizes=[0.8, 0.1, 0.1])
    net = ViT(ViT.make_config("vit-nano/4", image_size=28, in_channels=1, num_classes=10, depth=2))
    inputs = dm.task_inputs
    task = ImageClassificationTask(net, adamw(), log_images=False, **inputs)
    return fit_and_save(task, dm, tmp_path_factory.mktemp("vit_mnist") / "last.ckpt"), dm


def task_checkpoint(task, path) -> str:
    """A checkpoint as a task writes it, without a fit (for models that are refused before any weights are read)."""
    checkpoint = {"state_dict": task.state_dict()}
    task.on_save_checkpoint(checkpoint)
    torch.save(checkpoint, path)
    return str(path)


# ---- GPT ------------------------------------------------------------------------------------------------------
@torch.no_grad()
def test_gpt_bpe_export_loads_with_transformers(gpt_bpe_ckpt, tmp_path):
    export(gpt_bpe_ckpt, tmp_path / "hf")
    zoo, info = load_model_from_checkpoint(gpt_bpe_ckpt)
    ours = tokenizer_from_json(info["tokenizer"])
    assert ours.eos_id == 0  # zoo's BPE puts <|endoftext|> first
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert type(model).__name__ == "GPT2LMHeadModel"
    for source in (model.config, model.generation_config):
        assert source.bos_token_id == source.eos_token_id == ours.eos_id
    assert tokenizer.eos_token == tokenizer.bos_token == "<|endoftext|>" and tokenizer.eos_token_id == ours.eos_id
    assert tokenizer.pad_token_id == tokenizer.unk_token_id == model.config.pad_token_id == ours.eos_id  # batches pad

    text = shakespeare_val() + "<|endoftext|>" + shakespeare_val(200)
    ids = tokenizer(text)["input_ids"]
    assert ids == ours.encode(text) and ours.eos_id in ids
    assert tokenizer.decode(ids) == ours.decode(ids) == text
    idx = torch.tensor([ids[:32], ids[32:64]])
    torch.testing.assert_close(model(idx).logits, zoo(idx), **TOL)

    generator = transformers.pipeline("text-generation", model=str(tmp_path / "hf"))
    prompt = "ROMEO:\nWhat"
    out = generator(prompt, max_new_tokens=12, do_sample=False, return_tensors=True)[0]["generated_token_ids"]
    expected = zoo.generate(torch.tensor([ours.encode(prompt)]), 12, temperature=0.0)[0].tolist()
    assert list(out) == expected


@torch.no_grad()
def test_gpt_char_export_round_trips_the_character_ids(gpt_char_ckpt, tmp_path):
    export(gpt_char_ckpt, tmp_path / "hf")
    zoo, info = load_model_from_checkpoint(gpt_char_ckpt)
    ours = tokenizer_from_json(info["tokenizer"])
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    text = shakespeare_val()
    ids = tokenizer(text)["input_ids"]
    assert ids == ours.encode(text) and len(ids) == len(text)  # one id per character, newlines and spaces too
    assert tokenizer.decode(ids) == text
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    idx = torch.tensor([ids[:32]])
    torch.testing.assert_close(model(idx).logits, zoo(idx), **TOL)
    # The newline is the eos, but generation runs on past it as zoo's generate.py does.
    config = json.loads((tmp_path / "hf" / "generation_config.json").read_text())
    assert "eos_token_id" not in config and config["do_sample"] is True
    assert model.generation_config.eos_token_id is None


@torch.no_grad()
def test_gpt_char_export_has_special_tokens_on_rows_the_model_has(gpt_char_ckpt, tmp_path):
    """bos/eos/unk/pad are the newline's row (hf_tokenizer.char_special): lm-eval and batched pipelines find them,
    an unseen character encodes, and padding changes no logit of the real characters."""
    export(gpt_char_ckpt, tmp_path / "hf")
    zoo, info = load_model_from_checkpoint(gpt_char_ckpt)
    ours = tokenizer_from_json(info["tokenizer"])
    newline = ours.encode("\n")[0]
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    rows = zoo.tok_emb.weight.shape[0]
    assert model.config.vocab_size == rows == ours.vocab_size  # no row was added
    ids = (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.unk_token_id)
    assert ids == (newline,) * 4 and newline < rows
    assert (model.config.bos_token_id, model.config.eos_token_id, model.config.pad_token_id) == (newline,) * 3

    # A character outside the vocabulary is the unk id, in transformers and in the `tokenizers` library alone;
    # zoo's own tokenizer refuses it with a message that names it.
    assert "\u00e9" not in ours.chars
    assert tokenizer("caf\u00e9!")["input_ids"] == ours.encode("caf") + [newline] + ours.encode("!")
    raw = tokenizers.Tokenizer.from_file(str(tmp_path / "hf" / "tokenizer.json"))
    assert raw.encode("caf\u00e9").ids == ours.encode("caf\n")
    assert raw.decode(ours.encode("a\nb")) == "a\nb"  # newlines survive its decode (which skips special tokens)
    with pytest.raises(ValueError, match="not in the character vocabulary"):
        ours.encode("caf\u00e9")

    # A padded batch: the real characters of each row get zoo's logits.
    texts = [shakespeare_val(20), shakespeare_val(9)]
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    assert batch["input_ids"][1, 9:].eq(newline).all() and batch["attention_mask"][1, 9:].eq(0).all()
    logits = model(**batch).logits
    for row, text in enumerate(texts):
        n = len(text)
        torch.testing.assert_close(logits[row, :n], zoo(torch.tensor([ours.encode(text)]))[0], **TOL)

    # Batched generation in a pipeline (it pads on the left): each prompt continues as zoo's greedy decoding.
    generate = transformers.pipeline("text-generation", model=str(tmp_path / "hf"))
    prompts = ["ROMEO:\nWhat", "O"]
    outs = generate(prompts, batch_size=2, max_new_tokens=8, do_sample=False, return_tensors=True)
    pads = []
    for prompt, [out] in zip(prompts, outs):
        expected = zoo.generate(torch.tensor([ours.encode(prompt)]), 8, temperature=0.0)[0].tolist()
        out = list(out["generated_token_ids"])
        pads.append(len(out) - len(expected))
        assert out[pads[-1] :] == expected and out[: pads[-1]] == [newline] * pads[-1]
    assert pads == [0, len(prompts[0]) - len(prompts[1])]  # the short prompt was padded
    # The documented cost: decoding that skips special tokens (the pipeline's default) drops newlines; the model
    # card's example keeps them, and gives zoo's text.
    assert tokenizer.decode(ours.encode("a\nb"), skip_special_tokens=True) == "ab"
    out = generate(prompts[0], max_new_tokens=8, do_sample=False, skip_special_tokens=False)[0]["generated_text"]
    assert out == ours.decode(zoo.generate(torch.tensor([ours.encode(prompts[0])]), 8, temperature=0.0)[0].tolist())
    assert "skip_special_tokens=False" in (tmp_path / "hf" / "README.md").read_text()


@torch.no_grad()
def test_lm_eval_scores_the_char_export_without_extra_arguments(gpt_char_ckpt, tmp_path):
    """lm-eval's perplexity tasks (loglikelihood_rolling) need a prefix token; the export's is the newline, which
    gives the first character the context zoo gives it here."""
    huggingface = pytest.importorskip("lm_eval.models.huggingface")
    from lm_eval.api.instance import Instance

    export(gpt_char_ckpt, tmp_path / "hf")
    zoo, info = load_model_from_checkpoint(gpt_char_ckpt)
    ours = tokenizer_from_json(info["tokenizer"])
    text = shakespeare_val(20)  # one window: shorter than the 32 positions
    lm = huggingface.HFLM(pretrained=str(tmp_path / "hf"), device="cpu", batch_size=1)
    request = Instance(request_type="loglikelihood_rolling", doc={}, arguments=(text,), idx=0)
    (score,) = lm.loglikelihood_rolling([request])
    ids = torch.tensor([ours.encode("\n" + text)])
    expected = torch.log_softmax(zoo(ids[:, :-1]), dim=-1)[0].gather(1, ids[0, 1:, None]).sum()
    assert score == pytest.approx(expected.item(), abs=1e-3)


def lm_eval_task(export_dir, tasks_dir, task: str, limit: int, monkeypatch) -> dict:
    """lm-eval's own evaluator (as `lm_eval --include_path tasks_dir --tasks task`) on a task written by
    zoo.interop.lm_eval_tasks; it reads the local JSON lines only (offline) and indexes none of lm-eval's own tasks."""
    lm_eval = pytest.importorskip("lm_eval", reason="lm-eval is not installed: pip install -e '.[lm-eval]'")
    from lm_eval.tasks import TaskManager

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    return lm_eval.simple_evaluate(
        model="hf",
        model_args={"pretrained": str(export_dir)},
        tasks=[task],
        device="cpu",
        batch_size=1,
        limit=limit,
        log_samples=True,
        bootstrap_iters=0,
        task_manager=TaskManager(include_path=str(tasks_dir), include_defaults=False),
    )


@torch.no_grad()
def test_lm_eval_perplexity_task_reports_zoo_figures_on_the_same_windows(gpt_char_ckpt, tmp_path, monkeypatch):
    """zoo_text_ppl through lm-eval: its bits per byte and perplexities are those of zoo's own loss (GPT.loss, what
    eval.py averages) on the same window. Each passage is shorter than the 32 positions, so lm-eval scores it in one
    window: the prefix token (the newline) then the passage, as zoo scores "\n" + passage here."""
    from zoo.interop.lm_eval_tasks import write_tasks

    export(gpt_char_ckpt, tmp_path / "hf")
    zoo, info = load_model_from_checkpoint(gpt_char_ckpt)
    ours = tokenizer_from_json(info["tokenizer"])
    held_out = [line for line in shakespeare_val().splitlines() if 12 <= len(line) <= 32 and line == line.strip()][:2]
    (tmp_path / "held_out.txt").write_text("\n\n".join(held_out) + "\n", encoding="utf-8")
    tasks_dir = write_tasks(tmp_path / "tasks", tmp_path / "held_out.txt")
    figures = lm_eval_task(tmp_path / "hf", tasks_dir, "zoo_text_ppl", 2, monkeypatch)["results"]["zoo_text_ppl"]

    log_likelihood, n_bytes, n_words = 0.0, 0, 0
    for passage in held_out:
        ids = torch.tensor([ours.encode("\n" + passage)])
        log_likelihood -= zoo.loss(ids[:, :-1], ids[:, 1:]).item() * (ids.shape[1] - 1)
        n_bytes, n_words = n_bytes + len(passage.encode("utf-8")), n_words + len(passage.split())
    assert figures["bits_per_byte,none"] == pytest.approx(-log_likelihood / n_bytes / math.log(2), rel=1e-4)
    assert figures["byte_perplexity,none"] == pytest.approx(math.exp(-log_likelihood / n_bytes), rel=1e-4)
    assert figures["word_perplexity,none"] == pytest.approx(math.exp(-log_likelihood / n_words), rel=1e-4)


def jittered(ckpt: str, path) -> str:
    """The checkpoint with seeded noise on every weight (and its checksum recorded again): two training steps leave
    the model greedily writing spaces whatever the prompt, which would make a comparison of continuations empty."""
    from zoo.checkpointing.weights_checksum import record_checksum

    checkpoint = torch.load(ckpt, map_location="cpu", weights_only=False)
    generator = torch.Generator().manual_seed(0)
    for name, weight in checkpoint["state_dict"].items():
        if name.startswith("net.") and weight.is_floating_point():
            weight.add_(torch.randn(weight.shape, generator=generator), alpha=0.5)
    record_checksum(checkpoint)
    torch.save(checkpoint, path)
    return str(path)


@torch.no_grad()
def test_lm_eval_generation_task_continues_as_zoo_greedy(gpt_char_ckpt, tmp_path, monkeypatch):
    """zoo_text_gen through lm-eval: each logged continuation is zoo's greedy `generate` of the same prompt, cut at
    the first newline (the task's stop), and exact_match scores it against the line's next characters."""
    from zoo.interop.lm_eval_tasks import CONTINUATION_CHARS, line_continuations, write_tasks

    ckpt = jittered(gpt_char_ckpt, tmp_path / "jittered.ckpt")
    export(ckpt, tmp_path / "hf")
    zoo, info = load_model_from_checkpoint(ckpt)
    ours = tokenizer_from_json(info["tokenizer"])
    text = shakespeare_val()
    (tmp_path / "held_out.txt").write_text(text, encoding="utf-8")
    tasks_dir = write_tasks(tmp_path / "tasks", tmp_path / "held_out.txt")
    out = lm_eval_task(tmp_path / "hf", tasks_dir, "zoo_text_gen", 3, monkeypatch)

    docs = line_continuations(text)
    samples = sorted(out["samples"]["zoo_text_gen"], key=lambda s: s["doc_id"])
    assert [s["doc_id"] for s in samples] == [0, 1, 2]
    matches = []
    for sample, doc in zip(samples, docs):
        assert sample["doc"] == doc
        prompt = torch.tensor([ours.encode(doc["prompt"])])
        greedy = zoo.generate(prompt, CONTINUATION_CHARS, temperature=0)[0, prompt.shape[1] :]
        expected = ours.decode(greedy.tolist()).split("\n")[0]
        assert sample["filtered_resps"] == [expected]
        matches.append(expected == doc["continuation"])
    assert len({s["filtered_resps"][0] for s in samples}) == len(samples)  # continuations that depend on the prompt
    assert out["results"]["zoo_text_gen"]["exact_match,none"] == pytest.approx(sum(matches) / len(matches))


# ---- BERT -----------------------------------------------------------------------------------------------------
@torch.no_grad()
def test_bert_pretraining_export_loads_with_transformers(bert_pretraining_ckpt, tmp_path):
    export(bert_pretraining_ckpt, tmp_path / "hf")
    zoo, info = load_model_from_checkpoint(bert_pretraining_ckpt)
    ours = tokenizer_from_json(info["tokenizer"])
    model = transformers.AutoModelForPreTraining.from_pretrained(tmp_path / "hf").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert type(model).__name__ == "BertForPreTraining"
    assert (
        tokenizer.cls_token_id,
        tokenizer.sep_token_id,
        tokenizer.pad_token_id,
        tokenizer.mask_token_id,
        tokenizer.unk_token_id,
    ) == (ours.cls_id, ours.sep_id, ours.pad_id, ours.mask_id, ours.unk_id)
    assert model.config.pad_token_id == ours.pad_id
    vocab = (tmp_path / "hf" / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert vocab == [t for t, _ in sorted(ours.tokenizer.get_vocab().items(), key=lambda kv: kv[1])]

    lines = [line.strip() for line in Path(DATA("wikitext2", "wiki.test.raw")).read_text(encoding="utf-8").splitlines()]
    a, b = [line for line in lines if len(line.split()) > 12][:2]
    a, b = " ".join(a.split()[:12]), " ".join(b.split()[:12])
    encoded = tokenizer(a, b, return_tensors="pt")
    ids, segments = ours.build_pair(ours.encode(a), ours.encode(b))  # [CLS] A [SEP] B [SEP], segments 0.. 1..
    assert encoded["input_ids"][0].tolist() == ids and encoded["token_type_ids"][0].tolist() == segments
    out = model(**encoded)
    ref = zoo(encoded["input_ids"], token_type_ids=encoded["token_type_ids"])
    torch.testing.assert_close(out.prediction_logits, ref.mlm_logits, **TOL)
    torch.testing.assert_close(out.seq_relationship_logits, ref.nsp_logits, **TOL)


@torch.no_grad()
def test_sst2_classifier_export_has_real_labels_and_zoo_predictions(sst2_ckpt, tmp_path):
    export(sst2_ckpt, tmp_path / "hf")
    zoo, info = load_model_from_checkpoint(sst2_ckpt)
    ours = tokenizer_from_json(info["tokenizer"])
    model = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "hf").eval()
    assert type(model).__name__ == "BertForSequenceClassification"
    assert model.config.id2label == {0: "negative", 1: "positive"}  # SST-2's labels, not LABEL_0 / LABEL_1
    rows = Path(DATA("sst2", "dev.tsv")).read_text(encoding="utf-8").splitlines()[1:]
    sentences = [row.split("\t")[0] for row in rows if len(row.split()) <= 25][:24]  # within 128 positions
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    for row, sentence in enumerate(sentences):
        real = batch["attention_mask"][row].bool()
        assert batch["input_ids"][row][real].tolist() == ours.build_pair(ours.encode(sentence))[0]
    logits = model(**batch).logits
    expected = zoo(
        batch["input_ids"], token_type_ids=batch["token_type_ids"], attention_mask=batch["attention_mask"]
    ).logits
    torch.testing.assert_close(logits, expected, **TOL)

    classifier = transformers.pipeline("text-classification", model=str(tmp_path / "hf"))
    predicted = [p["label"] for p in classifier(sentences)]
    assert predicted == [model.config.id2label[int(i)] for i in expected.argmax(-1)]


# ---- ViT ------------------------------------------------------------------------------------------------------
@torch.no_grad()
def test_vit_export_loads_with_transformers_and_its_image_processor(mnist, tmp_path):
    ckpt, dm = mnist
    export(ckpt, tmp_path / "hf")
    zoo, info = load_model_from_checkpoint(ckpt)
    model = transformers.AutoModelForImageClassification.from_pretrained(tmp_path / "hf").eval()
    processor = transformers.AutoImageProcessor.from_pretrained(tmp_path / "hf")
    assert type(model).__name__ == "ViTForImageClassification"
    assert [model.config.id2label[i] for i in range(10)] == info["class_names"]
    digits, _ = load_mnist(Path(os.environ["ZOO_DATA_DIR"]), split="test", download=False)  # uint8 (N, 1, 28, 28)
    pictures = [Image.fromarray(digit[0].numpy(), mode="L") for digit in digits[:8]]  # what a user has: PIL images
    pixels = processor(pictures, return_tensors="pt")["pixel_values"]
    expected_pixels = torch.stack([dm.transforms(train=False)(digit) for digit in digits[:8]])  # zoo's eval input
    # transformers' pipelines feed RGB: the 1-channel model is exported as the 3-channel model equal to it on gray
    assert model.config.num_channels == 3 and pixels.shape == (8, 3, 28, 28)
    for channel in range(3):
        torch.testing.assert_close(pixels[:, channel : channel + 1], expected_pixels, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(model(pixel_values=pixels).logits, zoo(expected_pixels), **TOL)

    classify = transformers.pipeline("image-classification", model=str(tmp_path / "hf"))
    best = [result[0]["label"] for result in classify(pictures)]
    assert best == [info["class_names"][int(i)] for i in zoo(expected_pixels).argmax(-1)]


# ---- zoo's own format -----------------------------------------------------------------------------------------
@torch.no_grad()
def test_save_pretrained_round_trips_any_model(gpt_bpe_ckpt, tmp_path):
    gpt, _ = load_model_from_checkpoint(gpt_bpe_ckpt)
    export(gpt_bpe_ckpt, tmp_path / "gpt", "--format", "zoo")
    back = ZooModel.from_pretrained(tmp_path / "gpt")
    assert type(back) is GPT and back.config == gpt.config and not back.training
    idx = torch.randint(0, gpt.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    assert torch.equal(back(idx), gpt(idx))

    torch.manual_seed(0)  # the enc-dec Transformer has no HF class but keeps every detail here, tied matrix too
    transformer = Transformer.from_preset("transformer-tiny", src_vocab_size=120).eval()
    transformer.save_pretrained(tmp_path / "tr")
    again = Transformer.from_pretrained(tmp_path / "tr")
    src, tgt = torch.randint(3, 120, (2, 9)), torch.randint(3, 120, (2, 7))
    assert torch.equal(again(src, tgt), transformer(src, tgt))

    with pytest.raises(ValueError, match="holds a zoo 'transformer' model, not a 'gpt'"):
        GPT.from_pretrained(tmp_path / "tr")
    config = json.loads((tmp_path / "tr" / "config.json").read_text())
    (tmp_path / "tr" / "config.json").write_text(json.dumps({**config, "d_modle": 64}))
    with pytest.raises(ValueError, match="d_modle"):
        ZooModel.from_pretrained(tmp_path / "tr")
    (tmp_path / "tr" / "config.json").write_text(json.dumps({**config, "d_model": 2 * config["d_model"]}))
    with pytest.raises(ValueError, match="does not fit"):
        ZooModel.from_pretrained(tmp_path / "tr")
    with pytest.raises(FileNotFoundError, match="not found"):
        ZooModel.from_pretrained(tmp_path / "nothing")


# ---- bad input --------------------------------------------------------------------------------------------------
def one_line_error(capsys, argv) -> str:
    with pytest.raises(SystemExit) as stop:
        export_main([str(a) for a in argv])
    assert stop.value.code == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    return err


def test_bad_inputs_stop_with_one_line(capsys, tmp_path, sst2_ckpt):
    assert "checkpoint not found" in one_line_error(capsys, [tmp_path / "missing.ckpt", tmp_path / "out"])
    (tmp_path / "notes.ckpt").write_text("not a checkpoint")
    assert "not a readable checkpoint" in one_line_error(capsys, [tmp_path / "notes.ckpt", tmp_path / "out"])
    torch.save({"state_dict": {}}, tmp_path / "other.ckpt")
    assert "not a transformer-zoo checkpoint" in one_line_error(capsys, [tmp_path / "other.ckpt", tmp_path / "out"])

    transformer = Transformer.from_preset("transformer-tiny", src_vocab_size=120)
    ckpt = task_checkpoint(Seq2SeqTask(transformer, adamw()), tmp_path / "transformer.ckpt")
    export(ckpt, tmp_path / "transformer")  # no native class: its own modelling code goes along
    assert json.loads((tmp_path / "transformer" / "config.json").read_text())["auto_map"]["AutoModelForSeq2SeqLM"]
    capsys.readouterr()  # its note (no tokenizer stored) is not the next error

    # A GPT with lab switches is no longer refused either (tests/test_export_remote_code.py); a CNN still is
    # (tests/test_inputs_refused.py).
    rope = GPT.from_preset("gpt-nano", vocab_size=65, positions="rope", attn_score="additive")
    ckpt = task_checkpoint(CausalLMTask(rope, adamw(), num_samples=0), tmp_path / "rope.ckpt")
    export(ckpt, tmp_path / "rope")
    assert json.loads((tmp_path / "rope" / "config.json").read_text())["auto_map"]
    capsys.readouterr()  # its note (no tokenizer stored) is not the next error

    err = one_line_error(capsys, [sst2_ckpt, tmp_path / "out", "--labels", "bad,okay,good"])
    assert "3 labels" in err and "2 classes" in err and not (tmp_path / "out").exists()  # nothing written
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("x")
    assert "not empty" in one_line_error(capsys, [sst2_ckpt, tmp_path / "full"])


@pytest.mark.slow
def test_python_dash_m_zoo_export_and_labels_override(sst2_ckpt, tmp_path):
    result = run_module("zoo.export", str(sst2_ckpt), str(tmp_path / "hf"), "--labels", "neg,pos", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "tokenizer.json" in result.stdout and "vocab.txt" in result.stdout
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["id2label"] == {"0": "neg", "1": "pos"} and config["label2id"] == {"neg": 0, "pos": 1}
    assert config["architectures"] == ["BertForSequenceClassification"]
