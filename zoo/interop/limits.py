"""How long an input an exported model was trained on, so that the limit travels with it (tokenizer_config.json's
`model_max_length`, generation_config.json's `max_length`, the model card).

A model's position table can be longer than the windows it saw: bert-mini has 512 position rows, but a run with
data.block_size=64 trains only the first 64. The trained context is the shorter of the two."""

from __future__ import annotations

from zoo.models import ZooModel

# The DataModule option that bounds a training row's length, by the name each DataModule gives it.
_DATA_LENGTH_KEYS = ("block_size", "max_length")


def trained_context(model: ZooModel, data_hparams: dict | None = None) -> int | None:
    """The longest input, in tokens, the model was trained on: its own positions, cut to the DataModule's row
    length when the checkpoint recorded one (`datamodule_hyper_parameters`)."""
    limit = model.positions()
    if limit is None:
        return None
    for key in _DATA_LENGTH_KEYS:
        value = (data_hparams or {}).get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return min(limit, value)
    return limit
