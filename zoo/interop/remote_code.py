"""Exports for `transformers` with trust_remote_code=True, for the zoo models that no native class computes.

A native Hugging Face class (GPT2LMHeadModel, BertFor*, ViTForImageClassification) computes only the reference
architecture; a model with a lab switch (rope, QK-norm, average pooling without class token...) would load into
it silently wrong. Such a model is written with its own modelling code instead: the template files of
zoo/interop/remote (plain Python importing only torch and transformers, shipped as package data) are copied into
the export directory, and config.json's `auto_map` names their classes, so that `AutoConfig` and
`AutoModelFor...` load it with `trust_remote_code=True`. The templates keep zoo's module names, so zoo's state
dict is model.safetensors as it is."""

from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from zoo.models import BERT, GPT, Transformer, ViT, ZooModel

from .hf_config import label_maps, set_token_ids
from .hf_files import write_checkpoint

SHARED_FILES = ("zoo_config.py", "zoo_layers.py")  # what every model file imports relatively
# Every file an export may hold (zoo-export's --overwrite list).
REMOTE_FILES = (*SHARED_FILES, "zoo_gpt.py", "zoo_bert.py", "zoo_vit.py", "zoo_transformer.py")


@dataclass(frozen=True)
class RemoteSpec:
    """What a zoo model becomes: its template file, config class and the Auto classes it loads as (the first is
    config.json's `architectures`)."""

    file: str
    model_type: str
    config_class: str
    auto_classes: dict[str, str]  # transformers Auto class -> class name in `file`

    @property
    def architecture(self) -> str:
        return next(iter(self.auto_classes.values()))


def _bert_spec(model: BERT) -> RemoteSpec:
    head = model.config.head
    if head == "pretraining":  # the MLM logits are `logits`: also what AutoModelForMaskedLM / fill-mask read
        auto = {"AutoModelForPreTraining": "ZooBertForPreTraining", "AutoModelForMaskedLM": "ZooBertForPreTraining"}
    elif head == "classification":
        auto = {"AutoModelForSequenceClassification": "ZooBertForSequenceClassification"}
    else:
        auto = {"AutoModel": "ZooBertModel"}
    return RemoteSpec("zoo_bert.py", "zoo_bert", "ZooBertConfig", auto)


def _vit_spec(model: ViT) -> RemoteSpec:
    auto = "AutoModelForImageClassification" if model.config.num_classes else "AutoModel"
    return RemoteSpec("zoo_vit.py", "zoo_vit", "ZooViTConfig", {auto: "ZooViTForImageClassification"})


# zoo model class -> its spec (a function of the model where the head decides the Auto class).
SPECS = {
    GPT: lambda model: RemoteSpec(
        "zoo_gpt.py", "zoo_gpt", "ZooGPTConfig", {"AutoModelForCausalLM": "ZooGPTForCausalLM"}
    ),
    BERT: _bert_spec,
    Transformer: lambda model: RemoteSpec(
        "zoo_transformer.py",
        "zoo_transformer",
        "ZooTransformerConfig",
        {"AutoModelForSeq2SeqLM": "ZooTransformerForSeq2SeqLM"},
    ),
    ViT: _vit_spec,
}

# Config fields that change how zoo computes, never what: not written (the exported code has one path).
_COMPUTE_ONLY = ("attn_impl", "activation_checkpointing")
# Dropout is a training-time option; the exported modules run without it (they are for inference).
_TRAINING_ONLY = (
    "dropout",
    "attn_dropout",
    "ff_dropout",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "classifier_dropout",
)


def remote_spec(model: ZooModel) -> RemoteSpec:
    for cls, spec in SPECS.items():
        if type(model) is cls:
            return spec(model)
    supported = ", ".join(cls.__name__ for cls in SPECS)
    raise ValueError(
        f"no transformers remote-code export for a {type(model).__name__} yet (there is one for: {supported}); "
        "use `--format zoo` (zoo's own format) for it"
    )


# Config fields that the exported config hands to transformers' PretrainedConfig as they are (it knows them).
_PASSED_THROUGH = ("pad_token_id", "bos_token_id", "eos_token_id", "num_labels", "initializer_range")


def _defaults_dicts(name: str) -> dict[str, ast.Call]:
    """The `*_DEFAULTS = dict(...)` assignments of a template file, by name."""
    return {
        target.id: node.value
        for node in ast.parse(template(name)).body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if getattr(target, "id", "").endswith("_DEFAULTS")
    }


def template_fields(name: str) -> set[str]:
    """The zoo config fields a model template computes: the keywords of its `*_DEFAULTS = dict(...)`, with the
    shared block switches it unpacks (`**BLOCK_SWITCH_DEFAULTS` of zoo_config.py) read from there."""
    model_dicts = _defaults_dicts(name)
    if not model_dicts:
        raise ValueError(f"the template {name} has no *_DEFAULTS dict")
    shared = _defaults_dicts("zoo_config.py")
    fields = set()
    for keyword in next(iter(model_dicts.values())).keywords:
        if keyword.arg is not None:
            fields.add(keyword.arg)
        else:  # **NAME: a dict of zoo_config.py
            fields |= {k.arg for k in shared[keyword.value.id].keywords}
    return fields


def unknown_fields(model_class: type, spec: RemoteSpec) -> list[str]:
    """The fields of `model_class`'s config that the template of `spec` would not compute (a new switch, say)."""
    known = template_fields(spec.file) | set(_COMPUTE_ONLY + _TRAINING_ONLY + _PASSED_THROUGH)
    return sorted(f.name for f in dataclasses.fields(model_class.config_class) if f.name not in known)


def check_template(model: ZooModel) -> RemoteSpec:
    """The spec of `model`; a ValueError when its template does not compute every field of its config (a field
    the template ignored would be exported silently wrong)."""
    spec = remote_spec(model)
    unknown = unknown_fields(type(model), spec)
    if unknown:
        raise ValueError(
            f"the remote-code template zoo/interop/remote/{spec.file} does not compute the {type(model).__name__} "
            f"option(s) {', '.join(unknown)}; add them to it (and to zoo_layers.py) before exporting, or use "
            "--format zoo"
        )
    return spec


def template(name: str) -> str:
    """The text of a template file of zoo/interop/remote."""
    return (resources.files("zoo.interop") / "remote" / name).read_text(encoding="utf-8")


def remote_config(model: ZooModel, spec: RemoteSpec) -> dict:
    """config.json: zoo's config fields, plus what transformers reads to find and build the classes."""
    module = spec.file.removesuffix(".py")
    fields = {k: v for k, v in model.config_dict().items() if k not in _COMPUTE_ONLY + _TRAINING_ONLY}
    auto_map = {"AutoConfig": f"{module}.{spec.config_class}"}
    auto_map |= {auto: f"{module}.{name}" for auto, name in spec.auto_classes.items()}
    return {
        **fields,
        "model_type": spec.model_type,
        "architectures": [spec.architecture],
        "auto_map": auto_map,
        "zoo_model": type(model).__name__,
    }


def num_classes(model: ZooModel) -> int | None:
    """The classes a classifier head predicts (for its label maps); None for a model without one."""
    if isinstance(model, BERT) and model.config.head == "classification":
        return model.config.num_labels
    if isinstance(model, ViT) and model.config.num_classes:
        return model.config.num_classes
    return None


def save_remote(
    model: ZooModel,
    directory: str | Path,
    *,
    labels: list[str] | None = None,
    token_ids: dict[str, int | None] | None = None,
) -> RemoteSpec:
    """Write config.json, model.safetensors and the modelling code of `model` into `directory`.

    labels: class names of a classifier, in class-id order (default LABEL_0, LABEL_1, ...);
    token_ids: bos/eos/pad_token_id of the tokenizer that goes along (checked against the model's own)."""
    spec = check_template(model)
    config = remote_config(model, spec)
    classes = num_classes(model)
    if labels is not None or classes:
        names = labels if labels is not None else [f"LABEL_{i}" for i in range(classes)]
        config["id2label"], config["label2id"] = label_maps(names, classes)
    set_token_ids(config, token_ids or {})
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name in (*SHARED_FILES, spec.file):
        (directory / name).write_text(template(name), encoding="utf-8")
    # Non-persistent buffers (rope frequencies, sinusoid tables) are not in the state dict: the code recomputes them.
    write_checkpoint(directory, config, _unique_tensors(model))
    return spec


def _unique_tensors(model: ZooModel) -> dict:
    """The state dict with each shared tensor once (safetensors refuses aliases): a Transformer with a joint
    vocabulary registers one embedding as src_emb and tgt_emb; the exported code reads it as src_emb."""
    state = model.state_dict()
    if isinstance(model, Transformer) and model.config.share_embeddings:
        state.pop("tgt_emb.weight")
    return state
