"""The transformers side of an exported zoo model (trust_remote_code=True), written by its exporter beside zoo's
own modules (zoo_core_*.py, zoo_models_*.py), which compute the model: config.json holds zoo's config fields, and
model.safetensors is zoo's state dict, loaded into `model.zoo` (base_model_prefix)."""

from __future__ import annotations

import dataclasses

import torch
from transformers import PretrainedConfig, PreTrainedModel

from .zoo_core_attention import MultiHeadAttention
from .zoo_core_embeddings import SinusoidalPositionEmbedding, sinusoid_table
from .zoo_core_positions import RotaryEmbedding, alibi_slopes


class ZooConfig(PretrainedConfig):
    """zoo's config fields (those of `zoo_class.config_class`, with zoo's defaults) as attributes, beside what
    transformers reads. Unannotated class attributes: transformers makes every config class a dataclass."""

    zoo_class = None  # the zoo model class, set per model

    def __init__(self, **kwargs):
        own = {}
        for field in dataclasses.fields(self.zoo_class.config_class):
            if not hasattr(PretrainedConfig, field.name):  # num_labels is transformers' (from id2label)
                default = None if field.default is dataclasses.MISSING else field.default
                own[field.name] = kwargs.pop(field.name, default)
        # A tied output matrix is read from the token embedding by zoo's code; transformers ties nothing.
        kwargs["tie_word_embeddings"] = False
        super().__init__(**kwargs)
        for name, value in own.items():
            setattr(self, name, value)

    def zoo_config(self):
        """zoo's config dataclass (validated by zoo); a field that is None keeps zoo's default."""
        fields = {f.name: getattr(self, f.name, None) for f in dataclasses.fields(self.zoo_class.config_class)}
        return self.zoo_class.make_config(None, **fields)


# zoo's non-persistent buffers (not in model.safetensors), recomputed by zoo's own functions: transformers builds the
# model on the meta device and only fills in what the file holds.
BUFFERS = {
    (SinusoidalPositionEmbedding, "table"): lambda m, c: sinusoid_table(m.max_len, m.d_model, m.base),
    (RotaryEmbedding, "inv_freq"): lambda m, c: RotaryEmbedding(2 * m.inv_freq.numel(), c.sinusoid_base).inv_freq,
    (MultiHeadAttention, "alibi"): lambda m, c: alibi_slopes(m.n_heads),
}


class ZooPreTrainedModel(PreTrainedModel):
    """zoo's model as `self.zoo`, built from the config by zoo's own class."""

    base_model_prefix = "zoo"  # model.safetensors holds zoo's names: transformers prefixes them with `zoo.`

    def __init__(self, config):
        super().__init__(config)
        self.zoo = config.zoo_class(config.zoo_config())
        self.post_init()

    @torch.no_grad()
    def _init_weights(self, module):
        # Every weight is zoo's (initialized by zoo or loaded from model.safetensors): only buffers are computed here.
        for name in module._non_persistent_buffers_set:
            buffer = getattr(module, name)
            if buffer is None:
                continue
            compute = BUFFERS.get((type(module), name))
            if compute is None:
                raise TypeError(
                    f"zoo's {type(module).__name__}.{name} is not in model.safetensors and zoo_hf.BUFFERS cannot "
                    "compute it; add it there"
                )
            setattr(module, name, compute(module, self.config).to(buffer.device, buffer.dtype))
