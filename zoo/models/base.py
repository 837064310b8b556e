"""What every zoo model shares: a validated config dataclass, named presets and `from_preset`."""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any, ClassVar

from torch import nn

from zoo.core import check_attention_options, check_norm_options, check_positions

from .hub import ZooHubMixin

# Config fields of the lab's architecture switches (issues 11 and 12). A model whose values differ from its config
# dataclass's defaults is not the reference architecture (see `ZooModel.nondefault_switches`). Not every model has
# every field (`encoder_causal` is the Transformer's name for `causal`).
SWITCH_FIELDS = (
    "positions",
    "position_merge",
    "sinusoid_base",
    "attn_scale",
    "attn_score",
    "qk_proj",
    "attn_window",
    "qk_norm",
    "norm",
    "ff_inner_norm",
    "residual_attn",
    "residual_ff",
    "causal",
    "encoder_causal",
)


def _suggest(word: str, options) -> str:
    close = difflib.get_close_matches(word, list(options), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


class ZooModel(ZooHubMixin, nn.Module):
    """Base of the four models. Subclasses set `model_type`, `config_class` (a dataclass) and `presets`.
    `save_pretrained(dir)` / `ZooModel.from_pretrained(dir)` (zoo's own format) come from `ZooHubMixin` (hub.py)."""

    model_type: ClassVar[str]
    config_class: ClassVar[type]
    presets: ClassVar[dict[str, dict[str, Any]]]

    def __init__(self, config) -> None:
        super().__init__()
        if not isinstance(config, self.config_class):
            raise TypeError(f"{type(self).__name__} needs a {self.config_class.__name__}, got {type(config).__name__}")
        self.config = config

    @classmethod
    def preset_names(cls) -> list[str]:
        return list(cls.presets)

    @classmethod
    def make_config(cls, preset: str | None = None, **overrides):
        """The config of a preset with some fields replaced; unknown presets and fields are errors.
        An override of None keeps the preset's value (YAML configs list every field as null that way)."""
        base: dict[str, Any] = {}
        if preset is not None:
            if preset not in cls.presets:
                raise ValueError(
                    f"unknown {cls.__name__} preset '{preset}'{_suggest(preset, cls.presets)}; "
                    f"choose one of: {', '.join(cls.presets)}"
                )
            base = dict(cls.presets[preset])
        fields = {f.name for f in dataclasses.fields(cls.config_class)}
        for key in overrides:
            if key not in fields:
                raise ValueError(
                    f"unknown {cls.__name__} option '{key}'{_suggest(key, fields)}; "
                    f"valid options: {', '.join(sorted(fields))}"
                )
        base.update({k: v for k, v in overrides.items() if v is not None})
        return cls.config_class(**base)

    @classmethod
    def from_preset(cls, name: str, **overrides):
        """Build a model from a named preset, e.g. `GPT.from_preset("gpt2", dropout=0.1)`."""
        return cls(cls.make_config(name, **overrides))

    @classmethod
    def from_config_dict(cls, config: dict[str, Any]):
        return cls(cls.make_config(None, **config))

    def config_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self.config)

    def num_parameters(self, *, exclude_position_embeddings: bool = False) -> int:
        """Unique parameters (a tied output matrix counts once)."""
        total = sum(p.numel() for p in self.parameters())
        if exclude_position_embeddings:
            total -= sum(p.numel() for n, m in self.named_modules() if n.endswith("pos_emb") for p in m.parameters())
        return total

    def nondefault_switches(self) -> dict[str, Any]:
        """The lab switches (`SWITCH_FIELDS`) whose value differs from the reference architecture (the config
        dataclass's default), e.g. {"positions": "rope"}; empty for the published architecture. Exporters to
        other libraries should refuse a model for which this is not empty."""
        return {
            f.name: getattr(self.config, f.name)
            for f in dataclasses.fields(self.config)
            if f.name in SWITCH_FIELDS and getattr(self.config, f.name) != f.default
        }


def check_positive(**values: float) -> None:
    for name, value in values.items():
        if value is None or value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")


def check_probability(**values: float) -> None:
    for name, value in values.items():
        if not 0.0 <= value < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {value}")


def check_choice(name: str, value: str, choices) -> None:
    if value not in choices:
        raise ValueError(f"unknown {name} '{value}'{_suggest(value, choices)}; choose one of: {', '.join(choices)}")


def sinusoids_added(config) -> bool:
    """Whether unit-amplitude sinusoids are added to the token vectors (the models then scale those by
    sqrt(d_model), as the 2017 Transformer does)."""
    return config.positions == "sinusoidal" and config.position_merge == "add"


def check_attention_switches(*, attn_scale, attn_score, qk_proj, attn_window, qk_norm=False) -> None:
    """The lab's attention switches of a model config (one-line errors naming the option)."""
    check_attention_options(attn_scale, attn_score, qk_proj, attn_window)
    check_flags(qk_norm=qk_norm)


def check_flags(**values) -> None:
    for name, value in values.items():
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be true or false, got {value!r}")


def check_block_switches(config, **flags) -> None:
    """The block switches of a model config (issue 12): `norm`, `ff_inner_norm` and the boolean `flags`
    (residual_attn, residual_ff, causal...). ff_inner_norm 'none' is spelled None, its default, so that a sweep
    can switch it off by name (an override of null keeps the preset's value)."""
    if config.ff_inner_norm == "none":
        config.ff_inner_norm = None
    check_norm_options(config.norm, config.ff_inner_norm)
    check_flags(**flags)


def check_position_switches(*, positions, position_merge, sinusoid_base, d_model: int, head_dim: int) -> None:
    """The position switches of a model config; also the width constraints each kind has."""
    check_positions(positions, position_merge, sinusoid_base)
    if positions == "sinusoidal" and d_model % 2:
        raise ValueError(f"positions='sinusoidal' needs an even model width, got {d_model}")
    if positions == "rope" and head_dim % 2:
        raise ValueError(f"positions='rope' needs an even head dimension, got {head_dim}; change the width or heads")
