"""What every zoo model shares: a validated config dataclass, named presets and `from_preset`."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import torch
from torch import nn

from zoo.core import suggestion, switch_names

from .hub import ZooHubMixin


class ZooModel(ZooHubMixin, nn.Module):
    """Base of the four models. Subclasses set `model_type`, `config_class` (a dataclass) and `presets`.
    `save_pretrained(dir)` / `ZooModel.from_pretrained(dir)` (zoo's own format) come from `ZooHubMixin` (hub.py)."""

    model_type: ClassVar[str]
    config_class: ClassVar[type]
    presets: ClassVar[dict[str, dict[str, Any]]]
    # Methods that run the network like `forward` but return something else (the fused training `loss`): `forward`
    # always returns one thing (logits), and these are compiled with it and wrapped by FSDP like it.
    forward_methods: ClassVar[tuple[str, ...]] = ()
    # What checkpoints, export, import, model cards and limits read about a model, declared here at its class
    # (a new model: its own file, these attributes, and its import in zoo/models/__init__.py):
    reads: ClassVar[str]  # "text" (token ids) or "images"
    hf_native: ClassVar[bool] = False  # a Hugging Face class computes its reference layout (GPT-2, BERT, ViT)
    registry: ClassVar[dict[str, type[ZooModel]]] = {}  # model_type -> class, filled as each class is defined

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "model_type" in cls.__dict__:
            ZooModel.registry[cls.model_type] = cls

    def __init__(self, config) -> None:
        super().__init__()
        if not isinstance(config, self.config_class):
            raise TypeError(f"{type(self).__name__} needs a {self.config_class.__name__}, got {type(config).__name__}")
        self.config = config
        # The config fields given to `from_preset` (not None): what a config asked for beyond the preset. A task that
        # starts from a pretrained model refuses those that disagree with it (zoo.tasks.pretrained).
        self.config_overrides: dict[str, Any] = {}

    def compile(self, *args, **kwargs) -> None:
        """nn.Module.compile (forward), and each of `forward_methods` through torch.compile with the same options."""
        super().compile(*args, **kwargs)
        for name in self.forward_methods:
            setattr(self, name, torch.compile(getattr(self, name), *args, **kwargs))

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
                    f"unknown {cls.__name__} preset '{preset}'{suggestion(preset, cls.presets)}; "
                    f"choose one of: {', '.join(cls.presets)}"
                )
            base = dict(cls.presets[preset])
        fields = {f.name for f in dataclasses.fields(cls.config_class)}
        for key in overrides:
            if key not in fields:
                raise ValueError(
                    f"unknown {cls.__name__} option '{key}'{suggestion(key, fields)}; "
                    f"valid options: {', '.join(sorted(fields))}"
                )
        base.update({k: v for k, v in overrides.items() if v is not None})
        return cls.config_class(**base)

    @classmethod
    def from_preset(cls, name: str, **overrides):
        """Build a model from a named preset, e.g. `GPT.from_preset("gpt2", dropout=0.1)`."""
        model = cls(cls.make_config(name, **overrides))
        model.config_overrides = {k: v for k, v in overrides.items() if v is not None}
        return model

    @classmethod
    def from_config_dict(cls, config: dict[str, Any]):
        return cls(cls.make_config(None, **config))

    def config_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self.config)

    def positions(self) -> int | None:
        """How many token positions the model has (None for a model that reads no token sequence)."""
        return None

    def num_classes(self) -> int | None:
        """The classes its classifier head predicts (None without one)."""
        return None

    def pipeline_tag(self) -> str | None:
        """The Hugging Face Hub's task for it (the model card's pipeline_tag)."""
        return None

    def outside_native(self) -> dict[str, Any]:
        """The options its native Hugging Face class cannot compute: the lab switches, and (per model) the options
        outside the native layout."""
        return dict(self.nondefault_switches())

    def num_parameters(self, *, exclude_position_embeddings: bool = False) -> int:
        """Unique parameters (a tied output matrix counts once)."""
        total = sum(p.numel() for p in self.parameters())
        if exclude_position_embeddings:
            total -= sum(p.numel() for n, m in self.named_modules() if n.endswith("pos_emb") for p in m.parameters())
        return total

    def nondefault_switches(self) -> dict[str, Any]:
        """The lab switches (the fields of the `zoo.core.Switches` groups the config inherits) whose value differs
        from the reference architecture (the config dataclass's default), e.g. {"positions": "rope"}; empty for the
        published architecture. Exporters to other libraries should refuse a model for which this is not empty."""
        switches = switch_names(type(self.config))
        return {
            f.name: getattr(self.config, f.name)
            for f in dataclasses.fields(self.config)
            if f.name in switches and getattr(self.config, f.name) != f.default
        }


def check_positive(**values: float) -> None:
    for name, value in values.items():
        if value is None or value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")


def check_probability(**values: float) -> None:
    for name, value in values.items():
        if not 0.0 <= value < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {value}")


def check_heads_divide(config, width: str, heads: str, hint: str = "") -> None:
    """The width (field `width` of the config) splits evenly over the heads (field `heads`), named as the model
    names them."""
    d, h = getattr(config, width), getattr(config, heads)
    if d % h:
        raise ValueError(
            f"{width}={d} is not divisible by {heads}={h}; "
            f"choose {heads} so that each head gets {width} / {heads} dimensions{hint}"
        )
