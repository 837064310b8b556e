"""The base of the exported zoo models' configs (transformers' PretrainedConfig), for trust_remote_code=True.

Each model's config lists zoo's config fields with zoo's defaults; config.json holds them under zoo's names, so the
reader sees the same options zoo was trained with. `zoo_layers` reads the sizes under one set of names (zoo_width,
zoo_heads, zoo_ff, zoo_eps), which each config maps from its model's own."""

from __future__ import annotations

from transformers import PretrainedConfig

# The block's switches (zoo/core) with zoo's defaults, the same in every model: each model's `*_DEFAULTS` takes them
# from here, so a new switch is added once.
BLOCK_SWITCH_DEFAULTS = dict(
    attn_scale="sqrt_dk",
    attn_score="dot",
    qk_proj="separate",
    attn_window=None,
    qk_norm=False,
    norm="layernorm",
    ff_inner_norm=None,
    residual_attn=True,
    residual_ff=True,
)


class ZooConfig(PretrainedConfig):
    # Unannotated: transformers makes every config class a dataclass, and annotated class attributes would become
    # its fields.
    defaults = {}  # zoo's config fields and defaults, per model
    sizes = {}  # zoo_layers' size name -> the model's field (or a function of the config)

    def __init__(self, **kwargs):
        for name, default in self.defaults.items():
            setattr(self, name, kwargs.pop(name, default))
        # A tied output matrix is read from the token embedding in forward; transformers ties nothing.
        kwargs["tie_word_embeddings"] = False
        super().__init__(**kwargs)

    def _size(self, name):
        field = type(self).sizes[name]
        return field(self) if callable(field) else getattr(self, field)

    zoo_width = property(lambda self: self._size("zoo_width"))
    zoo_heads = property(lambda self: self._size("zoo_heads"))
    zoo_ff = property(lambda self: self._size("zoo_ff"))
    zoo_eps = property(lambda self: self._size("zoo_eps"))
