"""Reference lines of a lab question (`lab.reference`): what an arm must beat before its numbers say anything.

    {kind: ngram, metric: val/loss, learned_below: 3, orders: 4, method: kneser_ney|absolute}   # baselines.py
    {kind: chance, metric: val/acc, num_classes, margin, recipe, recipe_label}                 # 1 / num_classes
    {kind: tagger, metric: val/acc, orders: 6}                                                   # tag_baselines.py
    {kind: value, metric: val/bleu, value: 1.0, label: "...", better: higher}                  # a fixed number

An arm whose mean does not beat the bar **did not learn**: its claim checks are inconclusive, except on the metrics
matched by `exempt` (default `*@init`). The lines are computed from the jobs' own data and validation budget."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from fnmatch import fnmatch

import numpy as np

from . import baselines
from .metric_names import describe

KINDS = ("ngram", "chance", "value", "tagger")
DEFAULT_EXEMPT = ("*@init",)
_KEYS = {"kind", "metric", "learned_below", "orders", "method", "num_classes", "value", "label", "better", "exempt"}
_KEYS |= {"margin", "recipe", "recipe_label"}


class UnavailableError(Exception):
    """The reference cannot be computed for this sweep (said in the report, never an error)."""


@dataclass(frozen=True)
class Reference:
    metric: str
    lines: tuple[tuple[str, float], ...]  # (label, value) of every line shown: the n-gram orders, or one
    bar: tuple[str, float]  # the line an arm must beat
    lower_is_better: bool
    about: str  # what the lines are and what was scored, in words
    exempt: tuple[str, ...] = DEFAULT_EXEMPT  # metrics whose checks an arm's learning does not touch

    def shortfall(self, mean: float) -> str | None:
        """'did not learn (loss 3.33 ≥ trigram 2.02)', or None when `mean` beats the bar (or is not finite)."""
        if not math.isfinite(mean):
            return None
        label, value = self.bar
        if (mean < value) if self.lower_is_better else (mean > value):
            return None
        word = "loss" if "loss" in self.metric else describe(self.metric)
        sign = "≥" if self.lower_is_better else "≤"
        return f"did not learn ({word} {mean:.4g} {sign} {label} {value:.4g})"

    def bar_name(self) -> str:
        """'chance', 'chance + 0.5' or 'the trigram'."""
        label = self.bar[0].removesuffix(" =")  # "chance + 0.5 =" reads "chance + 0.5 = 0.6" beside its value
        return label if label.startswith("chance") else f"the {label}"

    def bar_text(self) -> str:
        """'val/loss ≥ trigram 2.02': what not learning means here."""
        label, value = self.bar
        return f"{self.metric} {'≥' if self.lower_is_better else '≤'} {label} {value:.4g}"

    def line(self) -> str:
        """The reference under the table's heading."""
        values = ", ".join(f"{label} {value:.4g}" for label, value in self.lines)
        rule = f"An arm whose mean {self.metric} does not beat {self.bar_name()} did not learn"
        rule += f" more than a {self.bar[0]} table" if self.bar[0].endswith("gram") else ""
        rule += ": the table says so, and the claim checks on it are inconclusive"
        if self.exempt:
            before = all(e.endswith("@init") for e in self.exempt)
            why = "read before training" if before else "what the arm learned does not change them"
            rule += f" (not those on {', '.join(f'`{e}`' for e in self.exempt)}: {why})"
        return f"**Reference** for {self.metric}: {values}. {self.about}. {rule}."


def reference_config(lab: dict) -> dict | None:
    """The question's `lab.reference`, checked (one-line errors for config mistakes), or None when it has none."""
    ref = lab.get("reference")
    if not ref:
        return None
    where = "lab.reference"
    if not isinstance(ref, dict) or ref.get("kind") not in KINDS or not ref.get("metric"):
        raise ValueError(f"{where} needs kind ({', '.join(KINDS)}) and metric, got {ref!r}")
    unknown = set(ref) - _KEYS
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(_KEYS))}")
    orders, below = int(ref.get("orders") or baselines.MAX_ORDER), int(ref.get("learned_below") or 3)
    if ref["kind"] == "ngram" and not 1 <= below <= orders:
        raise ValueError(f"{where}: learned_below ({below}) must be an order from 1 to orders ({orders})")
    if ref.get("method", baselines.DEFAULT_METHOD) not in baselines.METHODS:
        raise ValueError(f"{where}: method must be one of {', '.join(baselines.METHODS)}, got {ref['method']!r}")
    if ref["kind"] == "value" and not isinstance(ref.get("value"), (int, float)):
        raise ValueError(f"{where}: kind value needs a number `value`, got {ref.get('value')!r}")
    for key in ("margin", "recipe"):
        if ref.get(key) is not None and not (isinstance(ref[key], (int, float)) and ref[key] >= 0):
            raise ValueError(f"{where}: {key} must be a number >= 0, got {ref[key]!r}")
    if ref.get("better") not in (None, "lower", "higher"):
        raise ValueError(f"{where}: better must be lower or higher, got {ref['better']!r}")
    patterns = ref.get("exempt", list(DEFAULT_EXEMPT))
    if patterns is not None and not (isinstance(patterns, list) and all(isinstance(p, str) for p in patterns)):
        raise ValueError(f"{where}: exempt must be a list of metric patterns (e.g. ['*@init']), got {patterns!r}")
    _lower_is_better(ref)  # says now when it cannot tell which way is better
    return {**ref, "orders": orders, "learned_below": below}


def _exempt(ref: dict) -> tuple[str, ...]:
    return tuple(ref.get("exempt", DEFAULT_EXEMPT) or ())


def exempt(check: dict, ref: dict) -> bool:
    """Is every metric of the check one that an arm's learning does not touch?"""
    patterns = _exempt(ref)
    metrics = [m for m in (check.get("metric"), check.get("metric_b")) if m]
    return bool(metrics) and all(any(fnmatch(m, p) for p in patterns) for m in metrics)


def _lower_is_better(ref: dict) -> bool:
    if ref.get("better"):
        return ref["better"] == "lower"
    if ref["kind"] in ("ngram",):
        return True
    if ref["kind"] in ("chance", "tagger"):
        return False
    name = ref["metric"].lower()
    if "loss" in name or "ppl" in name:
        return True
    if "acc" in name or "bleu" in name:
        return False
    raise ValueError(f"lab.reference: say whether lower or higher {ref['metric']} is better (better: lower|higher)")


def compute(ref: dict, config: dict) -> Reference:
    """The reference for jobs run with `config` (a job's resolved config as a dict). UnavailableError: why not."""
    lower = _lower_is_better(ref)
    if ref["kind"] == "value":
        label = str(ref.get("label") or "reference")
        value = float(ref["value"])
        about = "From the question's config (lab.reference)"
        return Reference(ref["metric"], ((label, value),), (label, value), lower, about, _exempt(ref))
    if ref["kind"] == "chance":
        value = ref.get("value")
        if value is None:
            classes = ref.get("num_classes") or _model_classes(config)
            if not classes:
                raise UnavailableError("no num_classes in lab.reference or the model's config")
            value, source = 1.0 / int(classes), f"1/{int(classes)} classes"
        else:
            source = "from the question's config"
        about = f"Chance: {source}"
        line = ("chance", float(value))
        lines, bar = [line], line
        margin = float(ref.get("margin") or 0.0)
        if margin:
            bar = (f"chance + {margin:g} =", line[1] - margin if lower else line[1] + margin)
            lines.append(bar)
            about += f"; an arm must beat chance by {margin:g} to count as having learned"
        if ref.get("recipe") is not None:
            lines.append((str(ref.get("recipe_label") or "tuned recipe"), float(ref["recipe"])))
            about += "; the tuned recipe is shown to read the arms against, not as a bar"
        return Reference(ref["metric"], tuple(lines), bar, lower, about, _exempt(ref))
    if ref["kind"] == "tagger":
        return _tagger(ref, config)
    return _ngram(ref, config)


def _model_classes(config: dict) -> int | None:
    net = ((config.get("model") or {}).get("net") or {}) if isinstance(config.get("model"), dict) else {}
    for source in (net, config.get("data") or {}):
        if not isinstance(source, dict):  # an unresolved interpolation (a net looked up by name, inductive_bias)
            continue
        for key in ("num_classes", "num_labels"):
            if isinstance(source.get(key), int) and source[key] > 0:
                return source[key]
    return None


def _ngram(ref: dict, config: dict) -> Reference:
    from zoo.data.token_windows import TokenWindowsDataModule

    data, data_cfg = _built_data(config, TokenWindowsDataModule, "a language model's token windows")
    try:
        train, val_set = np.asarray(data.tokens("train")), data.eval_dataset("val")
        vocab = data.vocab_size
    except (OSError, ValueError, TypeError) as err:
        raise UnavailableError(f"the data could not be read ({' '.join(str(err).split())})") from None
    windows = _covered(val_set, config)
    try:
        method = ref.get("method", baselines.DEFAULT_METHOD)
        result = baselines.baselines(train, np.asarray(val_set.tokens), vocab, ref["orders"], method, windows)
    except ValueError as err:  # e.g. 4-grams of a 50k vocabulary do not fit in 63 bits
        raise UnavailableError(str(err)) from None
    method = "interpolated Kneser-Ney" if result.method == "kneser_ney" else "interpolated absolute discounting"
    name = data_cfg.get("dataset") or "the text"
    tokens = data_cfg.get("tokenizer", "")
    lines = tuple((baselines.order_name(n), v) for n, v in result.losses.items())
    bar = lines[ref["learned_below"] - 1]
    about = (
        f"Count n-gram models of {name}{f' ({tokens} tokens)' if tokens else ''}, fitted on its training split "
        f"({method}; zoo/lab/decide/baselines.py) and scored on {result.scored}, in nats per token"
    )
    return Reference(ref["metric"], lines, bar, True, about, _exempt(ref))


def _built_data(config: dict, base: type, what: str):
    """The jobs' DataModule (a `base`), built from their config without downloading, and the data config."""
    from hydra.utils import get_class

    data_cfg = dict(config.get("data") or {})
    target = data_cfg.pop("_target_", None)
    if not target:
        raise UnavailableError("the jobs' configs hold no data section")
    try:
        cls = get_class(target)
    except Exception as err:  # a target that does not import: say which
        raise UnavailableError(f"data._target_ {target} does not import ({err})") from None
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise UnavailableError(f"the data ({target}) is not {what}")
    try:
        data = cls(**{**data_cfg, "download": False})
        data.build_splits()
    except (OSError, ValueError, TypeError) as err:
        raise UnavailableError(f"the data could not be read ({' '.join(str(err).split())})") from None
    return data, data_cfg


def _covered(val_set, config: dict) -> baselines.Windows:
    """The validation windows the jobs' val metrics cover: the per-device batch, cut at limit_val_batches."""
    data_cfg, trainer = config.get("data") or {}, config.get("trainer") or {}
    devices = trainer.get("devices") if isinstance(trainer.get("devices"), int) else 1
    share = max(devices, 1) * int(trainer.get("accumulate_grad_batches") or 1)
    return baselines.covered_windows(
        val_set, int(data_cfg.get("batch_size", 1)) // share, trainer.get("limit_val_batches")
    )


def _tagger(ref: dict, config: dict) -> Reference:
    from zoo.data.char_tagging import CharTaggingDataModule

    from . import tag_baselines

    data, data_cfg = _built_data(config, CharTaggingDataModule, "a character-tagging dataset")
    val_set = data.eval_dataset("val")
    windows = _covered(val_set, config)
    train_tags, _ = data.tagged("train")
    scored = tag_baselines.window_positions(*data.tagged("val"), windows.starts, windows.block_size)
    try:
        result = tag_baselines.count_taggers(
            data.tokens("train"), train_tags, data.tokens("val"), scored, data.vocab_size, ref["orders"]
        )
    except ValueError as err:
        raise UnavailableError(str(err)) from None
    majority = ("majority class", result.majority)
    lines = (majority, *((f"left {k}-char count tagger", v) for k, v in result.by_order.items()))
    name = data_cfg.get("dataset") or "the text"
    about = (
        f"Taggers that read only the left context (zoo/lab/decide/tag_baselines.py): the commoner tag of {name}'s "
        "training split, and the tag seen most often there after the same k characters (the character and the k-1 "
        f"before it, backing off to shorter contexts), scored on the {result.scored} tagged characters of the "
        f"{len(windows.starts)} validation windows of {windows.block_size} characters that {ref['metric']} covers"
    )
    return Reference(ref["metric"], lines, majority, False, about, _exempt(ref))


def data_identity(config: dict) -> str:
    """What decides a reference: the data (less its training order and workers) and the validation budget."""
    data = {k: v for k, v in (config.get("data") or {}).items() if k not in ("seed", "num_workers")}
    trainer = config.get("trainer") or {}
    budget = {k: trainer.get(k) for k in ("limit_val_batches", "accumulate_grad_batches", "devices")}
    model = (config.get("model") or {}).get("net") if isinstance(config.get("model"), dict) else None
    classes = _model_classes({"model": {"net": model or {}}})
    return json.dumps([data, budget, classes], sort_keys=True, default=str)


def for_sweep(sweep) -> tuple[dict[tuple, Reference], list[str]]:
    """The reference of each point (once per distinct data and validation budget) and the report's lines."""
    from omegaconf import DictConfig, OmegaConf

    from .sweep import read_yaml

    ref = reference_config(sweep.lab)
    if ref is None or not any(ref["metric"] in j.metrics for j in sweep.jobs):
        return {}, []
    computed: dict[str, Reference | str] = {}
    points: dict[str, list[tuple]] = {}
    for key, jobs in sweep.members.items():
        path = jobs[0].directory / "config_resolved.yaml"
        loaded = read_yaml(path) if path.is_file() else None
        config = OmegaConf.to_container(loaded, resolve=False) if isinstance(loaded, DictConfig) else {}
        identity = data_identity(config)
        if identity not in computed:
            try:
                computed[identity] = compute(ref, config)
            except UnavailableError as why:
                computed[identity] = f"Reference for {ref['metric']} not computed: {why}."
        points.setdefault(identity, []).append(key)
    found = {key: computed[i] for i, keys in points.items() for key in keys if isinstance(computed[i], Reference)}
    lines = []
    for identity, keys in points.items():
        value = computed[identity]
        text = value.line() if isinstance(value, Reference) else value
        if len(points) > 1:  # the points differ in their data or budget: say which line is whose
            text += " Points: " + "; ".join(sweep.label(k) for k in keys) + "."
        lines.append(text)
    return found, list(dict.fromkeys(lines))
