"""Rebuilding the DataModule a checkpoint was trained on, without letting the checkpoint name any code.

A checkpoint that passes `torch.load(weights_only=True)` can still carry a `_target_` (say `os.system`) that Hydra
would run. So the class comes from an allow-list of zoo's DataModules, by the name the checkpoint records, and its
arguments may hold no Hydra instantiation keys anywhere. A `data=...` config on the command line is the user's own.
"""

from __future__ import annotations

import lightning as L

from zoo.data import ZooDataModule

KNOWN_DATAMODULES: dict[str, type[ZooDataModule]] = ZooDataModule.registry  # by "module.QualName"
INSTANTIATION_KEYS = ("_target_", "_partial_", "_args_", "_call_", "_recursive_", "_convert_")


def check_plain(value, where: str) -> None:
    """Refuse Hydra instantiation keys anywhere in `value`, naming the offending key."""
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            check_plain(item, f"{where}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            if key in INSTANTIATION_KEYS:
                raise ValueError(
                    f"{where}.{key} would make Hydra import or call code; a checkpoint may not name code, so its "
                    "data config is refused (pass data=<config> to evaluate on data you choose)"
                )
            check_plain(item, f"{where}.{key}")


def recorded_datamodule(checkpoint: dict, path) -> L.LightningDataModule:
    name = checkpoint["zoo"].get("datamodule")
    params = checkpoint.get("datamodule_hyper_parameters")
    if not name or params is None:
        raise ValueError(f"{path} does not record its data; pass data=<config>")
    if name not in KNOWN_DATAMODULES:
        known = ", ".join(sorted(n.rsplit(".", 1)[-1] for n in KNOWN_DATAMODULES))
        raise ValueError(f"{path} records an unknown DataModule '{name}' (known: {known}); pass data=<config>")
    params = dict(params)
    check_plain(params, "datamodule_hyper_parameters")
    return KNOWN_DATAMODULES[name](**params)
