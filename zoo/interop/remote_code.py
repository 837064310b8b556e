"""Exports for `transformers` with trust_remote_code=True, for the zoo models that no native class computes (a lab
switch on, or the encoder-decoder Transformer): config.json's `auto_map` names the classes written beside it.

That code is zoo's own source: the modules of zoo/core and zoo/models that the model needs, as flat files whose zoo
imports are made relative (zoo/core/attention.py is zoo_core_attention.py; not another byte changes), so the export
computes every switch as zoo does and imports no zoo. Hand-written are only the transformers classes, the templates
of zoo/interop/remote. Module names are zoo's, so zoo's state dict is model.safetensors as it is."""

from __future__ import annotations

import ast
import re
from importlib import resources
from pathlib import Path

from zoo.models import BERT, GPT, Transformer, ViT, ZooModel

from .hf_files import finish_config, write_checkpoint

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
    """The text of zoo's module `module` as an export holds it: each import of a zoo module made a relative import
    of its exported name (`from zoo.core import x` -> `from .zoo_core import x`); every other byte as it is."""
    text = SOURCES[module].read_text(encoding="utf-8")
    package = module.split(".") if module in PACKAGES else module.split(".")[:-1]
    lines = text.splitlines(keepends=True)
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and (node.level or node.module.split(".")[0] == "zoo"):
            target = node.module
            if node.level:
                target = ".".join([*package[: len(package) - node.level + 1], node.module])
            line = node.lineno - 1
            lines[line] = _FROM.sub(f"from .{exported_name(target)} import", lines[line], count=1)
    return "".join(lines)


def template(name: str) -> str:
    """The text of a file an export may hold: a template of zoo/interop/remote, or a zoo module (exported_source)."""
    if name in TEMPLATES:
        return (resources.files("zoo.interop") / "remote" / name).read_text(encoding="utf-8")
    return exported_source(ZOO_MODULES[name])


def remote_files(entry: str) -> dict[str, str]:
    """File name -> text of the template `entry` and of every file it imports relatively, transitively."""
    files, todo = {}, [entry]
    while todo:
        name = todo.pop()
        if name not in files:
            files[name] = template(name)
            tree = ast.parse(files[name])
            todo += [f"{n.module}.py" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 1]
    return files


# zoo model class -> the stem of its template's class names (zoo_<model_type>.py: Zoo<stem>Config, ...).
STEMS = {GPT: "GPT", BERT: "Bert", ViT: "ViT", Transformer: "Transformer"}


def _auto_classes(model: ZooModel) -> dict[str, str]:
    """transformers Auto class -> the template's class it loads as; the first is config.json's `architectures`."""
    if isinstance(model, GPT):
        return {"AutoModelForCausalLM": "ZooGPTForCausalLM"}
    if isinstance(model, Transformer):
        return {"AutoModelForSeq2SeqLM": "ZooTransformerForSeq2SeqLM"}
    if isinstance(model, ViT):
        return {
            (
                "AutoModelForImageClassification" if model.config.num_classes else "AutoModel"
            ): "ZooViTForImageClassification"
        }
    if model.config.head == "pretraining":  # the MLM logits are `logits`: what AutoModelForMaskedLM / fill-mask read
        return dict.fromkeys(("AutoModelForPreTraining", "AutoModelForMaskedLM"), "ZooBertForPreTraining")
    if model.config.head == "classification":
        return {"AutoModelForSequenceClassification": "ZooBertForSequenceClassification"}
    return {"AutoModel": "ZooBertModel"}


def remote_config(model: ZooModel) -> dict:
    """config.json: zoo's config fields, plus what transformers reads to find and build the classes."""
    module, auto = f"zoo_{model.model_type}", _auto_classes(model)
    return {
        **model.config_dict(),
        "model_type": module,
        "architectures": [next(iter(auto.values()))],
        "auto_map": {"AutoConfig": f"{module}.Zoo{STEMS[type(model)]}Config"}
        | {name: f"{module}.{cls}" for name, cls in auto.items()},
        "zoo_model": type(model).__name__,
    }


def save_remote(
    model: ZooModel,
    directory: str | Path,
    *,
    labels: list[str] | None = None,
    token_ids: dict[str, int | None] | None = None,
) -> None:
    """Write config.json, model.safetensors and the modelling code of `model` into `directory`.

    labels: class names of a classifier, in class-id order (default LABEL_0, LABEL_1, ...);
    token_ids: bos/eos/pad_token_id of the tokenizer that goes along (checked against the model's own)."""
    # Non-persistent buffers (rope frequencies, sinusoid tables) are not in the state dict: the code recomputes them.
    state = model.state_dict()
    if isinstance(model, Transformer) and model.config.share_embeddings:
        # safetensors refuses aliases: a joint vocabulary is one embedding, src_emb and tgt_emb; the code reads src_emb.
        state.pop("tgt_emb.weight")
    write_checkpoint(directory, finish_config(remote_config(model), model, labels, token_ids), state)
    for name, text in remote_files(f"zoo_{model.model_type}.py").items():
        (Path(directory) / name).write_text(text, encoding="utf-8")
