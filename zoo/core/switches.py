"""The core's options, declared once: small dataclasses that the four model configs inherit.

Each group holds its fields with the published models' defaults, checks them (one-line errors that name the
option) and hands its slice of keywords to `BlockStack`. A model config inherits the groups it has and keeps its
own size names; its `__post_init__` calls `self.check_core(d_model=..., n_heads=...)`, and it builds its stacks
with `**config.stack_options()`. The groups chain through `super()`, so a config checks and hands on exactly the
groups it inherits. Their fields are keyword-only: a config's own fields keep their positions in its constructor.

`Switches` are the lab's: a value other than the default is no longer the published architecture
(`ZooModel.nondefault_switches`). `ComputeOptions` change how the core computes, never what it computes.

Adding a switch: its field (and a check, if its type is not enough) in a group here, the module that reads it, one
line in the group's YAML (zoo/conf/switches/<group>.yaml, the same list written once for every model), its test.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from typing import Any

from .attention import ATTENTION_IMPLS, check_attention_options
from .norms import check_norm_options
from .positions import ATTENTION_POSITIONS, check_positions


def suggestion(word: str, options) -> str:
    """' (did you mean 'x'?)' for the closest of `options`, or ''."""
    close = difflib.get_close_matches(str(word), [str(o) for o in options], n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def check_choice(name: str, value: str, choices) -> None:
    if value not in choices:
        raise ValueError(f"unknown {name} '{value}'{suggestion(value, choices)}; choose one of: {', '.join(choices)}")


def check_flags(**values) -> None:
    for name, value in values.items():
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be true or false, got {value!r}")


def own_fields(config, group: type) -> dict[str, Any]:
    """The values of the fields `group` declares, read from `config` (which inherits it)."""
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(group)}


@dataclass(kw_only=True)
class CoreOptions:
    """Base of every group: the two hooks the groups extend."""

    def check_core(self, *, d_model: int, n_heads: int) -> None:
        """Check the options of every group the config inherits (`d_model` and `n_heads` under the model's own
        names; the heads already divide the width). A value with two spellings is brought to one here."""

    def stack_options(self) -> dict[str, Any]:
        """Keywords for `BlockStack` (which hands the block's on to every `Block`)."""
        return {}


@dataclass(kw_only=True)
class Switches(CoreOptions):
    """Base of the lab's switch groups. A group derives from it directly (see `switch_names`)."""


def switch_names(config_class: type) -> set[str]:
    """The fields of a config class that are lab switches: those of the `Switches` groups it inherits."""
    groups = [c for c in config_class.__mro__ if Switches in c.__bases__]
    return {f.name for group in groups for f in dataclasses.fields(group)}


@dataclass(kw_only=True)
class PositionSwitches(Switches):
    """Where token positions come from (zoo.core.positions). Learned and sinusoidal tables are the model's input
    embeddings and stop at their length; rope and alibi act inside self-attention and have no length limit."""

    positions: str = "learned"  # learned | sinusoidal | none | rope | alibi
    position_merge: str = "add"  # add | concat (zoo.core.PositionConcat: W [token ; position], W: 2d -> d)
    sinusoid_base: float = 10000.0  # of the sinusoids and of RoPE's frequencies

    def check_core(self, *, d_model: int, n_heads: int) -> None:
        super().check_core(d_model=d_model, n_heads=n_heads)
        check_positions(self.positions, self.position_merge, self.sinusoid_base)
        if self.positions == "sinusoidal" and d_model % 2:
            raise ValueError(f"positions='sinusoidal' needs an even model width, got {d_model}")
        if self.positions == "rope" and (d_model // n_heads) % 2:
            raise ValueError(
                f"positions='rope' needs an even head dimension, got {d_model // n_heads}; change the width or heads"
            )

    def stack_options(self) -> dict[str, Any]:
        inside = self.positions if self.positions in ATTENTION_POSITIONS else None
        return super().stack_options() | dict(attn_positions=inside, rope_base=self.sinusoid_base)

    def adds_sinusoids(self) -> bool:
        """Whether unit-amplitude sinusoids are added to the token vectors (the models then scale those by
        sqrt(d_model), as the 2017 Transformer does)."""
        return self.positions == "sinusoidal" and self.position_merge == "add"


@dataclass(kw_only=True)
class AttentionSwitches(Switches):
    """How attention scores are computed (zoo.core.MultiHeadAttention); all of them reach both attentions of a
    block except attn_window, which is for self-attention."""

    attn_scale: str | float = "sqrt_dk"  # sqrt_dk | none | a positive number multiplying the logits
    attn_score: str = "dot"  # dot | additive
    qk_proj: str = "separate"  # separate | shared | none
    # None, or w: a causal token attends to the w most recent tokens, a bidirectional one to those within w // 2
    # on each side.
    attn_window: int | None = None
    qk_norm: bool = False  # True: RMSNorm of each head's q and k before the scores (QK-norm)

    def check_core(self, *, d_model: int, n_heads: int) -> None:
        super().check_core(d_model=d_model, n_heads=n_heads)
        check_attention_options(self.attn_scale, self.attn_score, self.qk_proj, self.attn_window)
        check_flags(qk_norm=self.qk_norm)

    def stack_options(self) -> dict[str, Any]:
        return super().stack_options() | own_fields(self, AttentionSwitches)


@dataclass(kw_only=True)
class BlockSwitches(Switches):
    """The block's norms and skip paths (zoo.core.Block, zoo.core.norms)."""

    # layernorm | batchnorm | batchnorm_masked (statistics over real tokens only) | none: every norm of the residual
    # stream (the blocks', the final one and BERT's embedding norm)
    norm: str = "layernorm"
    # None | batchnorm | batchnorm_masked | layernorm: a norm between the FFN layers. "none" is accepted as the
    # spelled-out None, so that a sweep can switch it off by name (an override of null keeps the preset's value).
    ff_inner_norm: str | None = None
    residual_attn: bool = True  # False: no skip path around the attention sub-layers (self and cross)
    residual_ff: bool = True  # False: no skip path around the feed-forward sub-layer

    def check_core(self, *, d_model: int, n_heads: int) -> None:
        super().check_core(d_model=d_model, n_heads=n_heads)
        if self.ff_inner_norm == "none":
            self.ff_inner_norm = None
        check_norm_options(self.norm, self.ff_inner_norm)
        check_flags(residual_attn=self.residual_attn, residual_ff=self.residual_ff)

    def stack_options(self) -> dict[str, Any]:
        return super().stack_options() | own_fields(self, BlockSwitches)


@dataclass(kw_only=True)
class CausalSwitch(Switches):
    """Causal self-attention in an encoder that is bidirectional by default (BERT, ViT). The model reads it at
    forward time (as `is_causal`), so it hands nothing to the stack."""

    causal: bool = False  # True: each token attends to itself and the tokens before it

    def check_core(self, *, d_model: int, n_heads: int) -> None:
        super().check_core(d_model=d_model, n_heads=n_heads)
        check_flags(causal=self.causal)


@dataclass(kw_only=True)
class ComputeOptions(CoreOptions):
    """How the core computes: the same function either way, at another speed or memory. Not lab switches."""

    attn_impl: str = "auto"  # auto | sdpa | explicit (see zoo.core.attention)
    # True: every block's forward runs again in the backward pass instead of keeping its activations (a model or
    # batch that does not fit in memory trains; a step costs about one more forward). See zoo.core.BlockStack.
    activation_checkpointing: bool = False

    def check_core(self, *, d_model: int, n_heads: int) -> None:
        super().check_core(d_model=d_model, n_heads=n_heads)
        check_choice("attn_impl", self.attn_impl, ATTENTION_IMPLS)
        check_flags(activation_checkpointing=self.activation_checkpointing)

    def stack_options(self) -> dict[str, Any]:
        return super().stack_options() | own_fields(self, ComputeOptions)
