"""What travels with an export besides the weights: the trained context (generation_config.json's max_length, the
tokenizer's model_max_length) and a model card (README.md) with the model, its data, recipe, measured metrics,
command and limits. Exports of the session's runs (tests/trained.py: a GPT and an SST-2 classifier trained by the
train entry), loaded with transformers."""

from __future__ import annotations

import json
import shlex
import shutil

import pytest
import torch
import yaml

import zoo

transformers = pytest.importorskip("transformers")

from huggingface_hub import ModelCard  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

from zoo.checkpointing.reading import load_model_from_checkpoint  # noqa: E402
from zoo.data import tokenizer_from_json  # noqa: E402
from zoo.data.glue import truncate_longest_first  # noqa: E402
from zoo.entry.export import main as export_main  # noqa: E402
from zoo.interop.model_card import TrainingRun, write_model_card  # noqa: E402
from zoo.models import GPT, Transformer  # noqa: E402

CONTEXT = 64  # data.block_size of the GPT run (tests/trained.py, GPT_CHAR_RUN: the recipe's): its positions too
STEPS = 20  # its trainer.max_steps
BERT_CONTEXT = 24  # data.block_size of the SST-2 run (SST2_RUN), fewer than the model's position rows


@pytest.fixture(scope="module")
def gpt_run(gpt_char_run):
    """A run of the train entry (char GPT on tiny shakespeare): checkpoint, result.json, .hydra/overrides.yaml."""
    checkpoint = torch.load(gpt_char_run / "checkpoints" / "last.ckpt", weights_only=True)
    assert checkpoint["zoo"]["model_config"]["block_size"] == CONTEXT and checkpoint["global_step"] == STEPS
    return gpt_char_run


def export(checkpoint, directory, *extra) -> None:
    export_main([str(checkpoint), str(directory), *extra])


# ---- item: limits travel with the model -------------------------------------------------------------------------
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


@pytest.fixture(scope="module")
def sst2_checkpoint(sst2_run) -> str:
    return str(sst2_run / "checkpoints" / "last.ckpt")


@pytest.fixture(scope="module")
def bert_positions(sst2_checkpoint) -> int:
    """The classifier's position rows, more than the rows it was trained on."""
    positions = torch.load(sst2_checkpoint, weights_only=True)["zoo"]["model_config"]["max_position_embeddings"]
    assert positions > BERT_CONTEXT
    return positions


@torch.no_grad()
def test_bert_export_declares_its_positions_and_a_tokenizer_that_cuts_at_the_trained_context(
    sst2_checkpoint, bert_positions, tmp_path
):
    export(sst2_checkpoint, tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["max_position_embeddings"] == bert_positions  # the model's own rows, as its weights have them
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


def test_model_card_states_model_data_recipe_metrics_command_and_limits(gpt_run, tmp_path):
    export(gpt_run / "checkpoints" / "last.ckpt", tmp_path / "hf")
    card, text = card_of(tmp_path / "hf")
    assert card.data.library_name == "transformers" and card.data.pipeline_tag == "text-generation"
    assert "This model has been pushed to the Hub" not in text  # not huggingface_hub's empty template
    for heading in ("## Model", "## Training data", "## Training recipe", "## Results", "## Intended use and limits"):
        assert heading in text
    assert "GPT2LMHeadModel" in text and "gpt-mini" in text and "tinyshakespeare" in text
    overrides = yaml.safe_load((gpt_run / ".hydra" / "overrides.yaml").read_text())
    assert "python train.py " + " ".join(shlex.quote(o) for o in overrides) in text
    result = json.loads((gpt_run / "result.json").read_text())
    assert result["metric"] == "val/loss" and f"| `val/loss` | {result['value']:.6g} |" in text
    assert f"| `train/loss` | {result['metrics']['train/loss']:.6g} |" in text
    assert "time/" not in text.split("## Results")[1]  # timings are not results
    assert f"Trained context: {CONTEXT} tokens" in text and f"max_length={CONTEXT}" in text
    assert f"Optimizer steps: {STEPS}" in text and "AdamW" in text

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


def test_model_card_of_a_classifier_names_its_limits(sst2_checkpoint, bert_positions, tmp_path):
    export(sst2_checkpoint, tmp_path / "hf")
    card, text = card_of(tmp_path / "hf")
    assert card.data.pipeline_tag == "text-classification"
    assert "BertForSequenceClassification" in text and "sst2" in text
    assert "Classes, in id order: negative, positive." in text
    assert f"at most {BERT_CONTEXT} tokens" in text and f"{bert_positions} position rows" in text
    assert "truncation=True" in text


def test_model_card_loads_in_huggingface_hub_with_its_header(gpt_run, tmp_path):
    """huggingface_hub reads the card back (`ModelCard.load`): the header names the Hub's copy of the data, its
    language and the run's validation and test metrics (model-index); saved and loaded again, nothing changes."""
    export(gpt_run / "checkpoints" / "last.ckpt", tmp_path / "hf")
    path = tmp_path / "hf" / "README.md"
    card = ModelCard.load(path)
    data = card.data
    assert data.library_name == "transformers" and data.pipeline_tag == "text-generation"
    assert data.tags == ["transformer-zoo", "gpt", "causal_lm"] and data.base_model is None
    assert data.datasets == ["karpathy/tiny_shakespeare"] and data.language == ["en"]
    assert data.model_name == "gpt-mini for causal language modelling"
    result = json.loads((gpt_run / "result.json").read_text())
    evals = {e.metric_name: e for e in data.eval_results}
    assert evals["val/loss"].metric_value == pytest.approx(result["value"]) and "loss" in data.metrics
    assert evals["val/loss"].metric_type == "loss" and evals["val/loss"].dataset_split == "val"
    assert {e.task_type for e in evals.values()} == {"text-generation"}
    assert {e.dataset_type for e in evals.values()} == {"karpathy/tiny_shakespeare"}
    assert all(name.split("/")[0] in ("val", "test") for name in evals)  # no train/ or time/ entries
    # The header is the YAML of the data; the body keeps its facts; a second save and load changes nothing.
    assert yaml.safe_load(path.read_text().split("---\n")[1]) == data.to_dict()
    assert f"- Exported by transformer-zoo {zoo.__version__}." in card.text
    assert 'generate = pipeline("text-generation", model="path/to/this/folder")' in card.text
    assert f"| `val/loss` | {result['value']:.6g} |" in card.text
    card.save(tmp_path / "again.md")
    again = ModelCard.load(tmp_path / "again.md")
    assert again.data.to_dict() == data.to_dict() and again.text == card.text


def test_model_card_header_names_a_cached_base_model_and_no_results_without_a_hub_dataset(tmp_path):
    """A run started from a model of huggingface_hub's cache names it as base_model; a run on files of its own has no
    Hub dataset, so its metrics stay in the body's table only; a translation run on Multi30k names both languages."""
    model = GPT.from_preset("gpt-nano", vocab_size=65, block_size=32)
    cached = "/home/me/.cache/huggingface/hub/models--openai-community--gpt2/snapshots/0123abc"
    run = TrainingRun(task="causal_lm", data={"text_files": ["a.txt"]}, hparams={"pretrained": cached})
    run.metrics = {"val/loss": 2.5, "time/epoch_s": 3.0}
    write_model_card(tmp_path / "gpt", model, fmt="zoo", context=32, run=run)
    card = ModelCard.load(tmp_path / "gpt" / "README.md")
    assert card.data.base_model == "openai-community/gpt2" and card.data.library_name == "transformer-zoo"
    assert card.data.datasets is None and card.data.language is None and card.data.eval_results is None
    assert f"Started from the pretrained model `{cached}`." in card.text and "| `val/loss` | 2.5 |" in card.text
    assert "`text_files`: ['a.txt']" in card.text and "ZooModel.from_pretrained" in card.text

    model = Transformer.from_preset("transformer-tiny", src_vocab_size=50, max_len=12)
    run = TrainingRun(task="seq2seq", data={"dataset": "multi30k"}, metrics={"test/acc": 0.5, "train/loss": 1.0})
    write_model_card(tmp_path / "mt", model, fmt="hf", context=12, run=run, architecture="ZooTransformer")
    card = ModelCard.load(tmp_path / "mt" / "README.md")
    assert card.data.datasets == ["bentrevett/multi30k"] and card.data.language == ["de", "en"]
    assert card.data.pipeline_tag == "translation" and card.data.metrics == ["accuracy"]
    (result,) = card.data.eval_results
    assert (result.metric_name, result.metric_value, result.dataset_split) == ("test/acc", 0.5, "test")
    assert "at most 12 tokens per side" in card.text and "AutoModelForSeq2SeqLM" in card.text
