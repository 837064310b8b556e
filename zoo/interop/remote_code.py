"""Exports for `transformers` with trust_remote_code=True, for the zoo models that no native class computes.

A native Hugging Face class (GPT2LMHeadModel, BertFor*, ViTForImageClassification) computes only the reference
architecture; a model with a lab switch (rope, QK-norm, average pooling without class token...) would load into
it silently wrong. Such a model is written with its own modelling code instead, and config.json's `auto_map` names
its classes, so that `AutoConfig` and `AutoModelFor...` load it with `trust_remote_code=True`.

That code is zoo's own source: the modules of zoo/core and zoo/models that the model needs, written as flat files
(transformers loads one folder) whose zoo imports are made relative imports between them (zoo/core/attention.py
is zoo_core_attention.py, `from zoo.core import` becomes `from .zoo_core import`; not another byte changes), so
the export computes every switch as zoo does and imports no zoo. Hand-written are only the transformers classes,
the templates of zoo/interop/remote (package data): zoo_hf.py (config and model base), one file per model
(zoo_gpt.py...) and zoo_models_hub.py, which stands in for zoo's own save/load format (zoo/models/hub.py). The
model's module names are zoo's, so zoo's state dict is model.safetensors as it is."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from zoo.models import BERT, GPT, Transformer, ViT, ZooModel

from .hf_config import label_maps, set_token_ids
from .hf_files import write_checkpoint

PACKAGES = ("zoo.core", "zoo.models")  # whose modules an export copies (those its model imports)
# The hand-written files (zoo/interop/remote); a template named as a zoo module stands in for that module.
TEMPLATES = ("zoo_hf.py", "zoo_gpt.py", "zoo_bert.py", "zoo_vit.py", "zoo_transformer.py", "zoo_models_hub.py")


def exported_name(module: str) -> str:
    """The flat name under which an export holds zoo's module `module`: zoo.core.attention -> zoo_core_attention,
    zoo.core (its __init__.py) -> zoo_core."""
    return module.replace(".", "_")


def _zoo_sources() -> dict:
    """zoo module -> its source file, for every module of PACKAGES."""
    sources = {}
    for package in PACKAGES:
        for file in resources.files(package).iterdir():
            if file.name.endswith(".py"):
                sources[package if file.name == "__init__.py" else f"{package}.{file.name[:-3]}"] = file
    return sources


SOURCES = _zoo_sources()
ZOO_MODULES = {exported_name(module) + ".py": module for module in SOURCES}  # exported file name -> zoo module
# Every file an export may hold (zoo-export's --overwrite list).
REMOTE_FILES = tuple(sorted({*TEMPLATES, *ZOO_MODULES}))

_FROM = re.compile(r"from\s+\S+\s+import")


def exported_source(module: str) -> str:
    """The text of zoo's module `module` as an export holds it: each import of a zoo module, absolute or relative
    (`from zoo.core import x`, `from .norms import y`), made a relative import of its exported name
    (`from .zoo_core import x`, `from .zoo_core_norms import y`); every other byte as it is."""
    text = SOURCES[module].read_text(encoding="utf-8")
    package = module.split(".") if module in PACKAGES else module.split(".")[:-1]
    lines = text.splitlines(keepends=True)
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import) and any(alias.name.split(".")[0] == "zoo" for alias in node.names):
            raise ValueError(f"{module}: an export rewrites `from zoo... import x`, not `import zoo...`")
        if not isinstance(node, ast.ImportFrom) or not (node.level or node.module.split(".")[0] == "zoo"):
            continue
        target = node.module
        if node.level:
            if node.module is None:
                raise ValueError(f"{module}: an export rewrites `from .module import x`, not `from . import x`")
            target = ".".join([*package[: len(package) - node.level + 1], node.module])
        if target not in SOURCES:
            raise ValueError(f"{module} imports {target}: an export holds only the modules of {', '.join(PACKAGES)}")
        line = node.lineno - 1
        lines[line] = _FROM.sub(f"from .{exported_name(target)} import", lines[line], count=1)
    return "".join(lines)


def template(name: str) -> str:
    """The text of a file an export may hold: a template of zoo/interop/remote, or a zoo module (exported_source)."""
    if name in TEMPLATES:
        return (resources.files("zoo.interop") / "remote" / name).read_text(encoding="utf-8")
    if name in ZOO_MODULES:
        return exported_source(ZOO_MODULES[name])
    raise ValueError(f"{name} is neither a template of zoo/interop/remote nor a module of {', '.join(PACKAGES)}")


def remote_files(entry: str) -> dict[str, str]:
    """File name -> text of the template `entry` and of every file it imports relatively, transitively: the code
    an export holds for it (transformers copies the same files along when it loads `entry`)."""
    files, todo = {}, [entry]
    while todo:
        name = todo.pop()
        if name not in files:
            files[name] = template(name)
            tree = ast.parse(files[name])
            todo += [f"{n.module}.py" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 1]
    return files


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


def remote_spec(model: ZooModel) -> RemoteSpec:
    for cls, spec in SPECS.items():
        if type(model) is cls:
            return spec(model)
    supported = ", ".join(cls.__name__ for cls in SPECS)
    raise ValueError(
        f"no transformers remote-code export for a {type(model).__name__} yet (there is one for: {supported}); "
        "use `--format zoo` (zoo's own format) for it"
    )


def remote_config(model: ZooModel, spec: RemoteSpec) -> dict:
    """config.json: zoo's config fields, plus what transformers reads to find and build the classes."""
    module = spec.file.removesuffix(".py")
    auto_map = {"AutoConfig": f"{module}.{spec.config_class}"}
    auto_map |= {auto: f"{module}.{name}" for auto, name in spec.auto_classes.items()}
    return {
        **model.config_dict(),
        "model_type": spec.model_type,
        "architectures": [spec.architecture],
        "auto_map": auto_map,
        "zoo_model": type(model).__name__,
    }


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
    spec = remote_spec(model)
    config = remote_config(model, spec)
    classes = model.num_classes()
    if labels is not None or classes:
        names = labels if labels is not None else [f"LABEL_{i}" for i in range(classes)]
        config["id2label"], config["label2id"] = label_maps(names, classes)
    set_token_ids(config, token_ids or {})
    files = remote_files(spec.file)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text, encoding="utf-8")
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
