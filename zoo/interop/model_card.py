"""README.md of an export: what the model is, what it was trained on and how, what the run measured, how to load
it, and its limits. The facts come from the checkpoint and its run directory (`TrainingRun`); `ModelCardData` is the
Hub's YAML header, and `ModelCard.from_template` renders `TEMPLATE` below it."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from zoo import __version__
from zoo.data.sources import DATASETS
from zoo.models import ZooModel

TASKS = {
    "causal_lm": "causal language modelling (next-token prediction)",
    "mlm_nsp": "BERT pretraining (masked language modelling and next-sentence prediction)",
    "sequence_classification": "sentence classification",
    "seq2seq": "translation (sequence to sequence)",
    "image_classification": "image classification",
}
# zoo's datasets: what each is, the Hub dataset of the same data (the header's `datasets`), its languages.
DATASET_FACTS = {
    "tinyshakespeare": (
        "Tiny Shakespeare (char-rnn's input.txt, about 1.1 million characters)",
        "karpathy/tiny_shakespeare",
        ["en"],
    ),
    "wikitext2": ("WikiText-2 (raw)", "Salesforce/wikitext", ["en"]),
    "sst2": ("GLUE SST-2 (movie-review sentences, positive/negative)", "nyu-mll/glue", ["en"]),
    "mnist": ("MNIST (handwritten digits, 28x28 grayscale)", "ylecun/mnist", None),
    "cifar10": ("CIFAR-10 (32x32 colour images, 10 classes)", "uoft-cs/cifar10", None),
    "multi30k": ("Multi30k task 1 (image captions, German-English)", "bentrevett/multi30k", ["de", "en"]),
}
# Data settings that are not options: where files lie on the training machine, and the data named on its own line.
_NOT_OPTIONS = {"data_dir", "cache_dir", "num_workers", "download", "dataset"}
# The sizes worth a line, by label, in the order they are listed; each from whichever config field the model has.
_SIZES = {
    "layers": "n_layer num_hidden_layers depth",
    "encoder layers": "n_encoder_layers",
    "decoder layers": "n_decoder_layers",
    "width": "n_embd hidden_size embed_dim d_model",
    "heads": "n_head num_attention_heads num_heads n_heads",
    "vocabulary": "vocab_size",
    "source vocabulary": "src_vocab_size",
    "image size": "image_size",
    "patch size": "patch_size",
    "classes": "num_classes num_labels",
}
_METRIC_IDS = {"acc": "accuracy", "ppl": "perplexity"}  # zoo's metric names that have a Hub metric id

# Jinja: every tag but the first under a heading strips the newline before it (`{%-`), so a line appears only when
# it applies; the blank line at the end keeps the file's last newline. A bullet is one line, as the card has it:
# ruff: noqa: E501
TEMPLATE = """\
---
{{ card_data }}
---

# {{ title }}, trained with transformer-zoo

## Model

- zoo's `{{ class_name }}`{{ " (%s)" % run.preset if run.preset }}: {{ "{:,}".format(model.num_parameters()) }} parameters; {{ sizes }}.
{%- if not hf %}
- zoo's own format (config.json + model.safetensors); architecture switches: {{ switches or "none (the reference architecture)" }}.
{%- elif remote %}
- Loads in `transformers` with `trust_remote_code=True` as `{{ architecture }}`, whose code (the .py files beside config.json, torch and transformers only) computes {{ "zoo's options " ~ switches if switches else "the %s's layout" % class_name }}, which no native class does; zoo's own weights, unchanged: the same logits as zoo (tests/test_export_remote_code.py checks it to 1e-5).
{%- else %}
- Loads in `transformers` as `{{ architecture }}` with zoo's own weights, unchanged: the same logits as zoo (tests/test_export.py checks it to 1e-5).{% endif %}
{%- if labels %}
- Classes, in id order: {{ labels | join(", ") }}.{% endif %}
- Exported by transformer-zoo {{ version }}.

## Training data
{% if not run.data %}
Not recorded: the checkpoint holds no DataModule settings (it was not written by train.py).{% endif %}
{%- if run.data.dataset %}
- Dataset: `{{ run.data.dataset }}`, {{ dataset_text }}{{ "; source: " ~ source if source }}.{% endif %}
{%- for key in ("text_files", "train_files", "train_file", "val_files", "val_file") if run.data[key] %}
- `{{ key }}`: {{ run.data[key] }}{% endfor %}
{%- if run.tokenizer_kind and run.data %}
- Tokenizer: {{ run.tokenizer_kind }}, stored with the model.{% endif %}
{%- if options %}
- Data options: {{ options }}{{ " (batch_size is the global batch)" if "batch_size" in run.data }}.{% endif %}

## Training recipe
{% if run.task %}
- Task: {{ task }}.{% endif %}
{%- if run.hparams.pretrained %}
- Started from the pretrained model `{{ run.hparams.pretrained }}`.{% endif %}
{%- if run.step is not none %}
- Optimizer steps: {{ "{:,}".format(run.step) }} when the checkpoint was written.{% endif %}
{%- if optimizer %}{% set decay = run.hparams.get("weight_decay") %}
- Optimizer: {{ optimizer }}{{ ", weight decay %s" % decay if decay is not none }}.{% endif %}
{%- if schedule %}
- Learning-rate schedule: {{ schedule }}.{% endif %}
{%- if run.task or run.hparams.pretrained or run.step is not none or optimizer or schedule %}{# a blank line after the list #}
{% endif %}
{%- if run.command %}
The command that trained it (transformer-zoo's `train.py`, from the run's .hydra/overrides.yaml):

```bash
{{ run.command }}
```
{%- else %}
The training command was not recorded (no .hydra/overrides.yaml beside the checkpoint).{% endif %}

## Results
{% if results %}
Measured by the training run at its end (the run's result.json):

| metric | value |
|---|---|
{%- for name, value in results %}
| `{{ name }}` | {{ "{:.6g}".format(value) }} |{% endfor %}
{%- if checkpoint != "last.ckpt" %}

The exported checkpoint is {{ checkpoint }}, not the run's last one.{% endif %}
{%- else %}
No measured metrics: no result.json was found beside the checkpoint (train.py writes one into its run directory). `python eval.py ckpt_path=<checkpoint>` measures them.{% endif %}

## How to use
{% if not hf %}
With transformer-zoo installed:

```python
from zoo.models import ZooModel

model = ZooModel.from_pretrained("path/to/this/folder")
{%- else %}
With `transformers`:

```python
{%- if tag in ("text-generation", "text-classification", "image-classification") %}
from transformers import pipeline
{% if tag == "text-generation" %}
generate = pipeline("text-generation", model="path/to/this/folder"{{ trust }})
{#- a char tokenizer's special tokens are the newline (hf_tokenizer.char_special): keep them #}
print(generate("ROMEO:"{{ ", skip_special_tokens=False" if run.tokenizer_kind == "char" }})[0]["generated_text"])
{%- elif tag == "text-classification" %}
classify = pipeline("text-classification", model="path/to/this/folder", truncation=True{{ trust }})
print(classify("a gripping film"))
{%- else %}
classify = pipeline("image-classification", model="path/to/this/folder"{{ trust }})
print(classify("image.png")){% endif %}
{%- else %}{% set auto = "AutoModelForSeq2SeqLM" if tag == "translation" else "AutoModelForPreTraining" %}
from transformers import {{ auto }}, AutoTokenizer

model = {{ auto }}.from_pretrained("path/to/this/folder"{{ trust }})
{#- transformers reads config.json to pick the tokenizer, and a config with auto_map runs the directory's code:
    without the flag it stops at an interactive prompt. #}
tokenizer = AutoTokenizer.from_pretrained("path/to/this/folder"{{ trust }})
{%- if tag == "translation" %}
ids = tokenizer("A sentence.", return_tensors="pt")
print(tokenizer.batch_decode(model.generate(**ids), skip_special_tokens=True)){% endif %}
{%- endif %}
{%- endif %}
```

## Intended use and limits

- For research and teaching: a model of transformer-zoo's recipes, trained on the data above. It has not been evaluated for bias, safety or factual accuracy and is not meant for use in products.
{%- if model.model_type == "gpt" and context %}
- Trained context: {{ context }} tokens (the model has {{ positions }} positions).
{%- if hf and not remote %} generation_config.json sets `max_length={{ context }}`: generation stops at {{ context }} tokens, prompt included; a prompt of {{ context }} tokens or more is refused with a ValueError, and a `max_new_tokens` that takes prompt plus new tokens past {{ context }} fails in the position embedding. `pipeline(..., handle_long_generation="hole")` keeps the end of a long prompt.{% endif %}
{%- if remote %} generation_config.json sets `max_length={{ context }}`; a larger `max_new_tokens` slides a window of the model's positions over the text, as zoo's own `generate` does.
{%- else %} zoo's own `generate` slides a window of the context over longer texts instead.{% endif %}
{%- elif model.model_type == "bert" and context %}
- Trained on rows of at most {{ context }} tokens, [CLS] and [SEP] included (the model has {{ positions }} position rows{{ "; rows %d to %d were not trained by this run" % (context, positions - 1) if context < positions }}). The tokenizer's `model_max_length` is {{ context }}: pass `truncation=True` to cut longer inputs as zoo's data pipeline does (tokenizer.json truncates to it by itself).
{%- elif model.model_type == "transformer" and context %}
- Trained on sentences of at most {{ context }} tokens per side (BOS/EOS included).
{%- elif model.model_type == "vit" %}{% set c = model.config %}
- Trained on {{ c.image_size }}x{{ c.image_size }} images with {{ c.in_channels }} channel(s){{ " (exported as the equal 3-channel model: give grayscale images as RGB)" if hf and c.in_channels == 1 }}; other sizes are resized by the image processor (where the export has one).{% endif %}
{%- if run.tokenizer_kind == "char" and model.config.vocab_size %}
- Its tokenizer knows only the {{ model.config.vocab_size }} characters of the training text: others were never seen.
{%- if hf %} The exported tokenizer reads them as a newline, which is also its bos, eos and pad token; decoding with `skip_special_tokens=True` (the pipeline's default) drops newlines.{% endif %}{% endif %}

"""


@dataclass
class TrainingRun:
    """How the model was trained, as far as the checkpoint and its run directory tell; all optional."""

    task: str | None = None
    data: dict = field(default_factory=dict)  # the DataModule's hyper-parameters
    hparams: dict = field(default_factory=dict)  # the task's (optimizer, scheduler, weight decay)
    step: int | None = None  # optimizer steps taken when the checkpoint was written
    metrics: dict[str, float] = field(default_factory=dict)  # result.json of the run
    command: str | None = None  # `python train.py ...` from the run's .hydra/overrides.yaml
    checkpoint: str | None = None  # the file exported, as given
    preset: str | None = None  # model.net.name of the run's config, e.g. gpt-mini
    tokenizer_kind: str | None = None  # char, bpe or wordpiece


def _describe_partial(spec: dict | None) -> str | None:
    """`torch.optim.adamw.AdamW (lr=0.001, betas=[0.9, 0.99])` from a recorded Hydra partial."""
    if not spec or not spec.get("_target_"):
        return None
    options = ", ".join(f"{k}={v}" for k, v in spec.items() if not k.startswith("_"))
    name = str(spec["_target_"]).rsplit(".", 1)[-1]
    return f"`{name}` ({options})" if options else f"`{name}`"


def _is_result(name: str) -> bool:
    """A measurement of the model (val/, test/, train/), not of the machine or the optimizer."""
    return name.split("/")[0] in ("val", "test", "train") and not name.endswith(("_per_sec", "/mfu"))


def _base_model(pretrained) -> str | None:
    """The Hub id of a pretrained model read from huggingface_hub's cache (.../models--org--name/snapshots/...)."""
    match = re.search(r"models--([^/\\]+)[/\\]snapshots", str(pretrained or ""))
    return match.group(1).replace("--", "/") if match else None


def model_card(
    model: ZooModel,
    *,
    fmt: str,
    context: int | None,
    run: TrainingRun | None = None,
    architecture: str | None = None,
    labels: list[str] | None = None,
    remote: bool = False,
) -> ModelCard:
    """The card of `model` exported in `fmt` ("hf": for transformers, `architecture` its class; "zoo": zoo's own).
    `context`: the trained context length; `remote`: the export carries its own modelling code."""
    if fmt not in ("hf", "zoo"):
        raise ValueError(f"model card format must be 'hf' or 'zoo', got {fmt!r}")
    run, hf, config, positions = run or TrainingRun(), fmt == "hf", model.config_dict(), model.positions()
    remote, class_name, version = remote and hf, type(model).__name__, __version__
    sizes = ", ".join(f"{label} {config[k]}" for label, keys in _SIZES.items() for k in keys.split() if config.get(k))
    sizes += f", {positions} positions" if positions else ""
    switches = ", ".join(
        f"{k}={v!r}" for k, v in (model.outside_native() if remote else model.nondefault_switches()).items()
    )
    dataset = run.data.get("dataset")
    dataset_text, hub_dataset, language = DATASET_FACTS.get(dataset, (dataset, None, None))
    files = DATASETS.get(dataset, [])
    source = f"{files[0].url.rsplit('/', 1)[0]}/" if files else None
    options = ", ".join(
        f"{k}={v}"
        for k, v in run.data.items()
        if k not in _NOT_OPTIONS and not k.endswith(("_files", "_file")) and v is not None
    )
    tag, task = model.pipeline_tag(), TASKS.get(run.task or "", run.task)
    title = (run.preset or class_name) + (f" for {task.split(' (')[0]}" if run.task in TASKS else "")
    optimizer, schedule = (_describe_partial(run.hparams.get(k)) for k in ("optimizer", "scheduler"))
    results = sorted(
        ((k, v) for k, v in run.metrics.items() if _is_result(k) and math.isfinite(v)),
        key=lambda item: (("val", "test", "train").index(item[0].split("/")[0]), item[0]),
    )
    checkpoint = Path(run.checkpoint or "last.ckpt").name
    trust = ", trust_remote_code=True" if remote else ""
    # The validation and test metrics as the Hub's model-index: where the dataset is one of the Hub's.
    evals = [
        EvalResult(tag, hub_dataset, dataset_text, _METRIC_IDS.get(m, m), value, dataset_split=split, metric_name=name)
        for name, value in results
        for split, m in [name.split("/", 1)]
        if hub_dataset and tag and split in ("val", "test")
    ]
    data = ModelCardData(
        library_name="transformers" if hf else "transformer-zoo",
        pipeline_tag=tag,
        tags=["transformer-zoo", model.model_type] + ([run.task] if run.task else []),
        datasets=[hub_dataset] if hub_dataset else None,
        language=language,
        base_model=_base_model(run.hparams.get("pretrained")),
        metrics=sorted({e.metric_type for e in evals}) or None,
        model_name=title if evals else None,
        eval_results=evals or None,
    )
    return ModelCard.from_template(data, template_str=TEMPLATE, **locals())  # the template reads the names above


def write_model_card(directory: str | Path, model: ZooModel, **kwargs) -> Path:
    """Write README.md into `directory`; for an export for transformers its class is read from config.json."""
    directory = Path(directory)
    if kwargs.get("fmt") == "hf" and kwargs.get("architecture") is None and (directory / "config.json").is_file():
        config = json.loads((directory / "config.json").read_text())
        kwargs["architecture"] = (config.get("architectures") or [None])[0]
        kwargs.setdefault("remote", "auto_map" in config)
    path = directory / "README.md"
    model_card(model, **kwargs).save(path)
    return path
