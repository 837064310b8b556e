"""The DataModule base: the shared options recorded as each DataModule's hyperparameters, the registry derived from
the classes, and the global batch shared among devices under its own config key."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

import zoo.data
from zoo.data import BertPretrainingDataModule, LanguageModelDataModule, TranslationDataModule, ZooDataModule
from zoo.entry.evaluate import check_data_fits
from zoo.entry.recorded_data import KNOWN_DATAMODULES

SHARED = {"seed", "num_workers", "data_dir", "cache_dir", "download"}


def test_the_registry_is_every_datamodule_zoo_data_exports():
    exported = [getattr(zoo.data, name) for name in zoo.data.__all__]
    modules = {cls for cls in exported if isinstance(cls, type) and issubclass(cls, ZooDataModule)}
    assert set(KNOWN_DATAMODULES.values()) == modules - {ZooDataModule}
    assert all(name == f"{cls.__module__}.{cls.__qualname__}" for name, cls in KNOWN_DATAMODULES.items())


def test_a_subclass_outside_zoo_data_is_not_registered():
    class Mine(LanguageModelDataModule):
        pass

    assert Mine not in KNOWN_DATAMODULES.values()


def test_the_shared_options_are_recorded_with_the_subclass_options():
    lm = LanguageModelDataModule(batch_size=8, num_workers=0)
    assert SHARED | {"dataset", "tokenizer", "batch_size", "val_seed"} <= set(lm.hparams)
    assert lm.per_device_batch_size == lm.global_batch == 8
    bert = BertPretrainingDataModule(train_files=["x.txt"])
    assert bert.hparams["seed"] == bert.seed == 12345  # its own default, as before the base


def test_a_typo_in_a_shared_option_is_refused():
    with pytest.raises(TypeError, match="num_worker"):
        LanguageModelDataModule(num_worker=2)


def test_the_global_batch_is_named_by_its_own_key():
    data = TranslationDataModule(max_tokens=100)
    trainer = SimpleNamespace(world_size=3, accumulate_grad_batches=1)
    with pytest.raises(ValueError, match=r"data.max_tokens=100 \(the global batch, in tokens\) is not divisible"):
        data.trainer = trainer
        data.setup("fit")


@pytest.mark.parametrize(
    ("target", "fits"),
    [
        ("zoo.data.LanguageModelDataModule", True),
        ("zoo.data.token_shards.TokenShardsDataModule", True),  # the same task's other data
        ("mine.MyDataModule", True),  # the user's own: checked by what it gives the task
        ("zoo.data.ImageClassificationDataModule", False),
    ],
)
def test_eval_refuses_zoo_data_made_for_another_task(target, fits):
    info = {"task": "causal_lm", "model_type": "gpt"}
    cfg = OmegaConf.create({"_target_": target})
    if fits:
        check_data_fits(cfg, info)
        return
    with pytest.raises(ValueError, match="is an image dataset; evaluate it on a language-model text dataset"):
        check_data_fits(cfg, info)
