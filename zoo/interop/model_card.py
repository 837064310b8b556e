"""README.md of an export: a model card that says what the model is, what it was trained on and how, what the run
measured, how to load it, and what it is not good for (its trained context first). The facts come from the
checkpoint and its run directory (`TrainingRun`, gathered by zoo-export); what is unknown is said to be unknown.

The YAML header is huggingface_hub's `ModelCardData` (the Hub reads library, pipeline and tags from it)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from huggingface_hub import ModelCard, ModelCardData

from zoo.data.sources import DATASETS
from zoo.models import BERT, GPT, Transformer, ViT, ZooModel

from .exportable import outside_native
from .limits import position_limit

TASKS = {
    "causal_lm": "causal language modelling (next-token prediction)",
    "mlm_nsp": "BERT pretraining (masked language modelling and next-sentence prediction)",
    "sequence_classification": "sentence classification",
    "seq2seq": "translation (sequence to sequence)",
    "image_classification": "image classification",
}
DATASET_NAMES = {
    "tinyshakespeare": "Tiny Shakespeare (char-rnn's input.txt, about 1.1 million characters)",
    "wikitext2": "WikiText-2 (raw)",
    "sst2": "GLUE SST-2 (movie-review sentences, positive/negative)",
    "mnist": "MNIST (handwritten digits, 28x28 grayscale)",
    "cifar10": "CIFAR-10 (32x32 colour images, 10 classes)",
    "multi30k": "Multi30k task 1 (image captions, German-English)",
}
# Data options that say where files lie on the training machine, not how the model was trained.
_LOCAL_DATA_OPTIONS = {"data_dir", "cache_dir", "num_workers", "download"}
# The sizes worth a line, by config field, in the order they are listed.
_SIZES = {
    "n_layer": "layers",
    "num_hidden_layers": "layers",
    "depth": "layers",
    "n_encoder_layers": "encoder layers",
    "n_decoder_layers": "decoder layers",
    "n_embd": "width",
    "hidden_size": "width",
    "embed_dim": "width",
    "d_model": "width",
    "n_head": "heads",
    "num_attention_heads": "heads",
    "num_heads": "heads",
    "n_heads": "heads",
    "vocab_size": "vocabulary",
    "src_vocab_size": "source vocabulary",
    "image_size": "image size",
    "patch_size": "patch size",
    "num_classes": "classes",
    "num_labels": "classes",
}
PLACEHOLDER = "path/to/this/folder"


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


def pipeline_tag(model: ZooModel) -> str | None:
    if isinstance(model, GPT):
        return "text-generation"
    if isinstance(model, BERT):
        head = model.config.head
        return {"classification": "text-classification", "pretraining": "fill-mask"}.get(head, "feature-extraction")
    if isinstance(model, Transformer):
        return "translation"
    if getattr(model.config, "num_classes", 0):
        return "image-classification"
    return None


def _describe_partial(spec: dict | None) -> str | None:
    """`torch.optim.adamw.AdamW (lr=0.001, betas=[0.9, 0.99])` from a recorded Hydra partial."""
    if not spec or not spec.get("_target_"):
        return None
    options = ", ".join(f"{k}={v}" for k, v in spec.items() if not k.startswith("_"))
    name = str(spec["_target_"]).rsplit(".", 1)[-1]
    return f"`{name}` ({options})" if options else f"`{name}`"


def _model_section(
    model: ZooModel, fmt: str, architecture: str | None, run: TrainingRun, labels: list[str] | None, remote: bool
) -> list[str]:
    config = model.config_dict()
    sizes = ", ".join(f"{label} {config[key]}" for key, label in _SIZES.items() if config.get(key))
    positions = position_limit(model)
    sizes += f", {positions} positions" if positions else ""
    name = f" ({run.preset})" if run.preset else ""
    lines = [f"- zoo's `{type(model).__name__}`{name}: {model.num_parameters():,} parameters; {sizes}."]
    if fmt == "hf" and remote:
        switches = ", ".join(f"{k}={v!r}" for k, v in outside_native(model).items())
        what = f"zoo's options {switches}" if switches else f"the {type(model).__name__}'s layout"
        lines.append(
            f"- Loads in `transformers` with `trust_remote_code=True` as `{architecture}`, whose code (the .py files "
            f"beside config.json, torch and transformers only) computes {what}, which no native class does; "
            "zoo's own weights, unchanged: the same logits as zoo (tests/test_export_remote_code.py checks it to 1e-5)."
        )
    elif fmt == "hf":
        lines.append(
            f"- Loads in `transformers` as `{architecture}` with zoo's own weights, unchanged: the same logits as zoo "
            "(tests/test_export.py checks it to 1e-5)."
        )
    else:
        switches = model.nondefault_switches()
        listed = ", ".join(f"{k}={v!r}" for k, v in switches.items()) or "none (the reference architecture)"
        lines.append(f"- zoo's own format (config.json + model.safetensors); architecture switches: {listed}.")
    if labels:
        lines.append(f"- Classes, in id order: {', '.join(map(str, labels))}.")
    return lines


def _data_section(run: TrainingRun) -> list[str]:
    data = run.data
    if not data:
        return ["Not recorded: the checkpoint holds no DataModule settings (it was not written by train.py)."]
    lines = []
    name = data.get("dataset")
    if name:
        files = DATASETS.get(name, [])
        source = f"; source: {files[0].url.rsplit('/', 1)[0]}/" if files else ""
        lines.append(f"- Dataset: `{name}`, {DATASET_NAMES.get(name, name)}{source}.")
    for key in ("text_files", "train_files", "train_file", "val_files", "val_file"):
        if data.get(key):
            lines.append(f"- `{key}`: {data[key]}")
    if run.tokenizer_kind:
        lines.append(f"- Tokenizer: {run.tokenizer_kind}, stored with the model.")
    options = ", ".join(
        f"{k}={v}"
        for k, v in data.items()
        if k not in _LOCAL_DATA_OPTIONS and k != "dataset" and not k.endswith(("_files", "_file")) and v is not None
    )
    if options:
        note = " (batch_size is the global batch)" if "batch_size" in data else ""
        lines.append(f"- Data options: {options}{note}.")
    return lines


def _recipe_section(run: TrainingRun) -> list[str]:
    lines = []
    if run.task:
        lines.append(f"- Task: {TASKS.get(run.task, run.task)}.")
    if run.hparams.get("pretrained"):
        lines.append(f"- Started from the pretrained model `{run.hparams['pretrained']}`.")
    if run.step is not None:
        lines.append(f"- Optimizer steps: {run.step:,} when the checkpoint was written.")
    optimizer = _describe_partial(run.hparams.get("optimizer"))
    if optimizer:
        decay = run.hparams.get("weight_decay")
        lines.append(f"- Optimizer: {optimizer}" + (f", weight decay {decay}." if decay is not None else "."))
    schedule = _describe_partial(run.hparams.get("scheduler"))
    if schedule:
        lines.append(f"- Learning-rate schedule: {schedule}.")
    lines += [""] if lines else []
    if run.command:
        lines += ["The command that trained it (transformer-zoo's `train.py`, from the run's .hydra/overrides.yaml):"]
        lines += ["", "```bash", run.command, "```"]
    else:
        lines.append("The training command was not recorded (no .hydra/overrides.yaml beside the checkpoint).")
    return lines


def _is_result(name: str) -> bool:
    """A measurement of the model (val/, test/, train/ metrics), not of the machine (time/, throughput, MFU) or of
    the optimizer (learning rates)."""
    return name.split("/")[0] in ("val", "test", "train") and not name.endswith(("_per_sec", "/mfu"))


def _results_section(run: TrainingRun) -> list[str]:
    metrics = {k: v for k, v in run.metrics.items() if _is_result(k) and math.isfinite(v)}
    if not metrics:
        return [
            "No measured metrics: no result.json was found beside the checkpoint (train.py writes one into its run "
            "directory). `python eval.py ckpt_path=<checkpoint>` measures them."
        ]
    order = {"val": 0, "test": 1, "train": 2}
    rows = sorted(metrics.items(), key=lambda item: (order.get(item[0].split("/")[0], 3), item[0]))
    lines = ["Measured by the training run at its end (the run's result.json):", "", "| metric | value |", "|---|---|"]
    lines += [f"| `{name}` | {value:.6g} |" for name, value in rows]
    if run.checkpoint and Path(run.checkpoint).name != "last.ckpt":
        lines += ["", f"The exported checkpoint is {Path(run.checkpoint).name}, not the run's last one."]
    return lines


def _usage_section(model: ZooModel, fmt: str, run: TrainingRun, remote: bool) -> list[str]:
    if fmt == "zoo":
        code = ["from zoo.models import ZooModel", "", f'model = ZooModel.from_pretrained("{PLACEHOLDER}")']
        return ["With transformer-zoo installed:", "", "```python", *code, "```"]
    tag = pipeline_tag(model)
    if tag == "text-generation":
        call = [
            f'generate = pipeline("text-generation", model="{PLACEHOLDER}")',
            'print(generate("ROMEO:")[0]["generated_text"])',
        ]
        if run.tokenizer_kind == "char":  # its special tokens are the newline (hf_tokenizer.char_special): keep them
            call[-1] = 'print(generate("ROMEO:", skip_special_tokens=False)[0]["generated_text"])'
    elif tag == "text-classification":
        call = [
            f'classify = pipeline("text-classification", model="{PLACEHOLDER}", truncation=True)',
            'print(classify("a gripping film"))',
        ]
    elif tag == "image-classification":
        call = [f'classify = pipeline("image-classification", model="{PLACEHOLDER}")', 'print(classify("image.png"))']
    else:
        auto = "AutoModelForSeq2SeqLM" if tag == "translation" else "AutoModelForPreTraining"
        trust = ", trust_remote_code=True" if remote else ""
        code = [
            f"from transformers import {auto}, AutoTokenizer",
            "",
            f'model = {auto}.from_pretrained("{PLACEHOLDER}"{trust})',
            # transformers reads config.json to pick the tokenizer, and a config with auto_map runs the
            # directory's code: without the flag it stops at an interactive prompt.
            f'tokenizer = AutoTokenizer.from_pretrained("{PLACEHOLDER}"{trust})',
        ]
        if tag == "translation":
            code += [
                'ids = tokenizer("A sentence.", return_tensors="pt")',
                "print(tokenizer.batch_decode(model.generate(**ids), skip_special_tokens=True))",
            ]
        return ["With `transformers`:", "", "```python", *code, "```"]
    if remote:  # the model's code is in the directory: transformers runs it only when told to
        call[0] = call[0].replace(")", ", trust_remote_code=True)", 1)
    return ["With `transformers`:", "", "```python", "from transformers import pipeline", "", *call, "```"]


def _limits_section(model: ZooModel, fmt: str, context: int | None, run: TrainingRun, remote: bool) -> list[str]:
    lines = [
        "- For research and teaching: a model of transformer-zoo's recipes, trained on the data above. It has not "
        "been evaluated for bias, safety or factual accuracy and is not meant for use in products."
    ]
    positions = position_limit(model)
    if isinstance(model, GPT) and context:
        lines.append(
            f"- Trained context: {context} tokens (the model has {positions} positions). "
            + (
                f"generation_config.json sets `max_length={context}`: generation stops at {context} tokens, prompt "
                f"included; a prompt of {context} tokens or more is refused with a ValueError, and a `max_new_tokens` "
                f"that takes prompt plus new tokens past {context} fails in the position embedding. "
                '`pipeline(..., handle_long_generation="hole")` keeps the end of a long prompt. '
                if fmt == "hf" and not remote
                else ""
            )
            + (
                f"generation_config.json sets `max_length={context}`; a larger `max_new_tokens` slides a window of "
                "the model's positions over the text, as zoo's own `generate` does."
                if fmt == "hf" and remote
                else "zoo's own `generate` slides a window of the context over longer texts instead."
            )
        )
    elif isinstance(model, BERT) and context:
        untrained = f"; rows {context} to {positions - 1} were not trained by this run" if context < positions else ""
        lines.append(
            f"- Trained on rows of at most {context} tokens, [CLS] and [SEP] included (the model has {positions} "
            f"position rows{untrained}). The tokenizer's `model_max_length` is {context}: pass `truncation=True` to "
            "cut longer inputs as zoo's data pipeline does (tokenizer.json truncates to it by itself)."
        )
    elif isinstance(model, Transformer) and context:
        lines.append(f"- Trained on sentences of at most {context} tokens per side (BOS/EOS included).")
    elif isinstance(model, ViT):
        c = model.config
        gray = " (exported as the equal 3-channel model: give grayscale images as RGB)" if fmt == "hf" else ""
        lines.append(
            f"- Trained on {c.image_size}x{c.image_size} images with {c.in_channels} channel(s)"
            f"{gray if c.in_channels == 1 else ''}; other sizes are resized by the image processor (where the export "
            "has one)."
        )
    vocab = getattr(model.config, "vocab_size", None)
    if run.tokenizer_kind == "char" and vocab:
        lines.append(f"- Its tokenizer knows only the {vocab} characters of the training text: others were never seen.")
        if fmt == "hf":
            lines[-1] += (
                " The exported tokenizer reads them as a newline, which is also its bos, eos and pad token; decoding"
                " with `skip_special_tokens=True` (the pipeline's default) drops newlines."
            )
    return lines


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
    """The card of `model` exported in `fmt` ("hf": for transformers, `architecture` its class; "zoo": zoo's own
    format). `context`: the trained context length (zoo.interop.limits.trained_context); `labels`: class names;
    `remote`: the export carries its own modelling code (trust_remote_code=True)."""
    if fmt not in ("hf", "zoo"):
        raise ValueError(f"model card format must be 'hf' or 'zoo', got {fmt!r}")
    run = run or TrainingRun()
    tags = ["transformer-zoo", model.model_type] + ([run.task] if run.task else [])
    data = ModelCardData(
        library_name="transformers" if fmt == "hf" else "transformer-zoo", pipeline_tag=pipeline_tag(model), tags=tags
    )
    what = TASKS.get(run.task or "", "")
    title = f"{run.preset or type(model).__name__}" + (f" for {what.split(' (')[0]}" if what else "")
    sections = {
        "Model": _model_section(model, fmt, architecture, run, labels, remote),
        "Training data": _data_section(run),
        "Training recipe": _recipe_section(run),
        "Results": _results_section(run),
        "How to use": _usage_section(model, fmt, run, remote),
        "Intended use and limits": _limits_section(model, fmt, context, run, remote),
    }
    body = [f"# {title}, trained with transformer-zoo", ""]
    for heading, lines in sections.items():
        body += [f"## {heading}", "", *lines, ""]
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(body))


def write_model_card(directory: str | Path, model: ZooModel, **kwargs) -> Path:
    """Write README.md into `directory` (replacing huggingface_hub's stub that `save_pretrained` leaves there);
    for an export for transformers its class is read from the config.json already written."""
    directory = Path(directory)
    if kwargs.get("fmt") == "hf" and kwargs.get("architecture") is None and (directory / "config.json").is_file():
        config = json.loads((directory / "config.json").read_text())
        kwargs["architecture"] = (config.get("architectures") or [None])[0]
        kwargs.setdefault("remote", "auto_map" in config)
    path = directory / "README.md"
    model_card(model, **kwargs).save(path)
    return path
