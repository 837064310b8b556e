"""What travels with an export besides the weights: the trained context (generation_config.json's max_length, the
tokenizer's model_max_length) and a model card (README.md) with the model, its data, recipe, measured metrics,
command and limits. Exports of a real train.py run and of an in-process fit, loaded with transformers."""

from __future__ import annotations

import json
import shlex
import shutil
from functools import partial

import lightning as L
import pytest
import torch
import yaml

transformers = pytest.importorskip("transformers")

from huggingface_hub import ModelCard  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

from zoo.checkpointing.reading import load_model_from_checkpoint  # noqa: E402
from zoo.data import GlueDataModule, tokenizer_from_json  # noqa: E402
from zoo.data.glue import truncate_longest_first  # noqa: E402
from zoo.entry.export import main as export_main  # noqa: E402
from zoo.models import BERT  # noqa: E402
from zoo.tasks import SequenceClassificationTask  # noqa: E402

from conftest import QUIET_SHORT_RUN, assert_ok, run_script  # noqa: E402

CONTEXT = 32  # data.block_size of the GPT run: the model's positions too
BERT_CONTEXT, BERT_POSITIONS = 24, 128  # a BERT with more position rows than its training rows used


@pytest.fixture(scope="module")
def gpt_run(tmp_path_factory):
    """A real run of train.py (char GPT on tiny shakespeare): checkpoint, result.json, .hydra/overrides.yaml."""
    run_dir = tmp_path_factory.mktemp("gpt_run")
    overrides = [o for o in QUIET_SHORT_RUN if o != "validate=false"]
    result = run_script(
        "train.py",
        *overrides,
        "trainer.max_steps=3",
        "trainer.limit_val_batches=2",
        "optimized_metric=val/loss",
        "model.net.name=gpt-nano",
        f"data.block_size={CONTEXT}",
        f"hydra.run.dir={run_dir}",
    )
    assert_ok(result)
    return run_dir


def export(checkpoint, directory, *extra) -> None:
    export_main([str(checkpoint), str(directory), *extra])


# ---- item: limits travel with the model -------------------------------------------------------------------------
@pytest.mark.slow
@torch.no_grad()
def test_gpt_export_carries_its_context_and_generation_stays_inside_it(gpt_run, tmp_path):
    checkpoint = gpt_run / "checkpoints" / "last.ckpt"
    export(checkpoint, tmp_path / "hf")
    generation = json.loads((tmp_path / "hf" / "generation_config.json").read_text())
    assert generation["max_length"] == CONTEXT
    assert json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())["model_max_length"] == CONTEXT
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["n_positions"] == CONTEXT

    generate = transformers.pipeline("text-generation", model=str(tmp_path / "hf"))
    assert generate.tokenizer.model_max_length == CONTEXT
    # Default settings (the pipeline would add max_new_tokens=256 without the model's max_length): stops at the
    # context, where GPT2LMHeadModel would otherwise raise IndexError in its position embedding.
    for prompt in ("ROMEO:", "x" * (CONTEXT - 1)):
        out = generate(prompt, return_tensors=True)[0]["generated_token_ids"]
        assert len(out) == CONTEXT  # the character vocabulary has no end-of-text token to stop earlier
    # Greedy, the export continues as zoo's own generate does within the context.
    zoo, info = load_model_from_checkpoint(checkpoint)
    ours = tokenizer_from_json(info["tokenizer"])
    prompt = "ROMEO:\nWhat"
    out = generate(prompt, do_sample=False, return_tensors=True)[0]["generated_token_ids"]
    ids = torch.tensor([ours.encode(prompt)])
    assert list(out) == zoo.generate(ids, CONTEXT - ids.shape[1], temperature=0.0)[0].tolist()
    # A prompt as long as the context: a clear refusal naming max_length, not an IndexError.
    with pytest.raises(ValueError, match="max_length"):
        generate("x" * (CONTEXT + 5))
    # The tokenizer's model_max_length lets the pipeline keep the end of a long prompt.
    out = generate("x" * (CONTEXT + 5), max_new_tokens=4, handle_long_generation="hole", return_tensors=True)
    assert len(out[0]["generated_token_ids"]) == CONTEXT


def fit_sst2_checkpoint(path) -> str:
    torch.manual_seed(0)
    dm = GlueDataModule(vocab_size=800, block_size=BERT_CONTEXT, batch_size=8, max_train_rows=400, max_val_rows=16)
    dm.prepare_data()
    net = BERT.from_preset(
        "bert-tiny",
        head="classification",
        vocab_size=dm.tokenizer.vocab_size,
        pad_token_id=dm.tokenizer.pad_id,
        num_labels=2,
        max_position_embeddings=BERT_POSITIONS,
    )
    task = SequenceClassificationTask(net, partial(torch.optim.AdamW, lr=1e-3), tokenizer=dm.tokenizer)
    trainer = L.Trainer(
        max_steps=2,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
    )
    trainer.fit(task, datamodule=dm)
    trainer.save_checkpoint(path)
    return str(path)


@pytest.fixture(scope="module")
def sst2_checkpoint(tmp_path_factory) -> str:
    return fit_sst2_checkpoint(tmp_path_factory.mktemp("bert_sst2") / "model.ckpt")


@torch.no_grad()
def test_bert_export_declares_its_positions_and_a_tokenizer_that_cuts_at_the_trained_context(sst2_checkpoint, tmp_path):
    export(sst2_checkpoint, tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["max_position_embeddings"] == BERT_POSITIONS  # the model's own rows, as its weights have them
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert tokenizer.model_max_length == BERT_CONTEXT

    zoo, info = load_model_from_checkpoint(sst2_checkpoint)
    ours = tokenizer_from_json(info["tokenizer"])
    long = "the film is a long , winding and often gripping story about " * 6
    a, b = ours.encode(long), ours.encode("it was fine .")
    truncate_longest_first(a, b, BERT_CONTEXT - 3)  # what zoo's GLUE data does to a row
    expected_ids = ours.build_pair(a, b)[0]
    encoded = tokenizer(long, "it was fine .", truncation=True, return_tensors="pt")
    assert encoded["input_ids"][0].tolist() == expected_ids and len(expected_ids) == BERT_CONTEXT
    # The tokenizers library alone (tokenizer.json) cuts at the same place without being asked.
    alone = Tokenizer.from_file(str(tmp_path / "hf" / "tokenizer.json"))
    assert alone.encode(long, "it was fine .").ids == expected_ids

    classify = transformers.pipeline("text-classification", model=str(tmp_path / "hf"), truncation=True)
    logits = zoo(encoded["input_ids"], token_type_ids=encoded["token_type_ids"]).logits
    assert classify([long])[0]["label"] == classify.model.config.id2label[int(logits.argmax(-1))]


# ---- item: a model card -----------------------------------------------------------------------------------------
def card_of(directory) -> tuple[ModelCard, str]:
    card = ModelCard.load(directory / "README.md")
    return card, card.text


@pytest.mark.slow
def test_model_card_states_model_data_recipe_metrics_command_and_limits(gpt_run, tmp_path):
    export(gpt_run / "checkpoints" / "last.ckpt", tmp_path / "hf")
    card, text = card_of(tmp_path / "hf")
    assert card.data.library_name == "transformers" and card.data.pipeline_tag == "text-generation"
    assert "This model has been pushed to the Hub" not in text  # not huggingface_hub's empty template
    for heading in ("## Model", "## Training data", "## Training recipe", "## Results", "## Intended use and limits"):
        assert heading in text
    assert "GPT2LMHeadModel" in text and "gpt-nano" in text and "tinyshakespeare" in text
    overrides = yaml.safe_load((gpt_run / ".hydra" / "overrides.yaml").read_text())
    assert "python train.py " + " ".join(shlex.quote(o) for o in overrides) in text
    result = json.loads((gpt_run / "result.json").read_text())
    assert result["metric"] == "val/loss" and f"| `val/loss` | {result['value']:.6g} |" in text
    assert f"| `train/loss` | {result['metrics']['train/loss']:.6g} |" in text
    assert "time/" not in text.split("## Results")[1]  # timings are not results
    assert f"Trained context: {CONTEXT} tokens" in text and f"max_length={CONTEXT}" in text
    assert "Optimizer steps: 3" in text and "AdamW" in text

    export(gpt_run / "checkpoints" / "last.ckpt", tmp_path / "zoo", "--format", "zoo")
    card, text = card_of(tmp_path / "zoo")
    assert card.data.library_name == "transformer-zoo" and "ZooModel.from_pretrained" in text
    assert f"| `val/loss` | {result['value']:.6g} |" in text and f"Trained context: {CONTEXT} tokens" in text

    # A checkpoint away from its run directory: the card says what is unknown rather than guessing.
    alone = tmp_path / "alone" / "model.ckpt"
    alone.parent.mkdir()
    shutil.copy(gpt_run / "checkpoints" / "last.ckpt", alone)
    export(alone, tmp_path / "alone_hf")
    _, text = card_of(tmp_path / "alone_hf")
    assert "No measured metrics" in text and "training command was not recorded" in text
    assert "tinyshakespeare" in text  # the checkpoint itself still records its data


def test_model_card_of_a_classifier_names_its_limits(sst2_checkpoint, tmp_path):
    export(sst2_checkpoint, tmp_path / "hf")
    card, text = card_of(tmp_path / "hf")
    assert card.data.pipeline_tag == "text-classification"
    assert "BertForSequenceClassification" in text and "sst2" in text
    assert "Classes, in id order: negative, positive." in text
    assert f"at most {BERT_CONTEXT} tokens" in text and f"{BERT_POSITIONS} position rows" in text
    assert "truncation=True" in text
