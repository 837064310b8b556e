"""Rebuilding the DataModule a checkpoint was trained on, without letting the checkpoint name any code.

A checkpoint is a file from anywhere: even one that passes `torch.load(weights_only=True)` can carry a config with a
`_target_` (say `os.system`, or `torch.load` with `weights_only: False`), and handing that to
`hydra.utils.instantiate` would run it. So the class comes from an allow-list of zoo's DataModules, looked up by
the name the checkpoint records, and its arguments must be plain values (numbers, strings, lists, mappings) with no
Hydra instantiation keys anywhere. A config the user passes on the command line (`data=...`) is the user's own and
is instantiated as usual.
"""

from __future__ import annotations

import lightning as L

from zoo.data import ZooDataModule

# zoo.data's DataModules by "module.QualName", as a checkpoint records them (importing zoo.data registers them all).
KNOWN_DATAMODULES: dict[str, type[ZooDataModule]] = ZooDataModule.registry
# Keys that make Hydra call or import something.
INSTANTIATION_KEYS = ("_target_", "_partial_", "_args_", "_call_", "_recursive_", "_convert_")
PLAIN = (str, int, float, bool, type(None))


def check_plain(value, where: str) -> None:
    """Refuse anything but plain data, naming the offending key."""
    if isinstance(value, PLAIN):
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            check_plain(item, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{where} has a non-text key {key!r}; refusing the recorded data config")
            if key in INSTANTIATION_KEYS:
                raise ValueError(
                    f"{where}.{key} would make Hydra import or call code; a checkpoint may not name code, so its "
                    "data config is refused (pass data=<config> to evaluate on data you choose)"
                )
            check_plain(item, f"{where}.{key}")
        return
    raise ValueError(f"{where} holds a {type(value).__name__}, not plain data; refusing the recorded data config")


def recorded_datamodule(checkpoint: dict, path) -> L.LightningDataModule:
    """The DataModule recorded in a zoo checkpoint, rebuilt from the allow-list with checked plain arguments."""
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
