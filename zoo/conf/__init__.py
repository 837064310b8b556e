"""The Hydra configs, shipped inside the package so that the console scripts find them after `pip install .`
(`pkg://zoo.conf`). Groups: model, data, trainer, logger, callbacks, paths, hydra, experiment, hparams_search, debug."""
