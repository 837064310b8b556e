"""How long an input an exported model was trained on: its positions, cut to the DataModule's row length (bert-mini
has 512 position rows, a run with data.block_size=64 trains 64). It travels with the export."""

from __future__ import annotations

from zoo.models import ZooModel

# The DataModule option that bounds a training row's length, by the name each DataModule gives it.
_DATA_LENGTH_KEYS = ("block_size", "max_length")


def trained_context(model: ZooModel, data_hparams: dict | None = None) -> int | None:
    """The longest input, in tokens, the model was trained on: its positions, cut to the recorded DataModule's rows."""
    limit = model.positions()
    if limit is None:
        return None
    for key in _DATA_LENGTH_KEYS:
        value = (data_hparams or {}).get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return min(limit, value)
    return limit
