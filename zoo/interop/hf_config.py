"""The config.json keys every export for transformers shares, native or remote code: class names and the
special-token ids of the tokenizer that goes along."""

from __future__ import annotations

TOKEN_ID_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id")


def label_maps(labels: list[str], num_classes: int | None) -> tuple[dict[str, str], dict[str, int]]:
    """id2label / label2id for a classifier of `num_classes` classes (None: the model has no classifier)."""
    if num_classes is None:
        raise ValueError("labels were given, but the model has no classifier to name")
    labels = [str(label) for label in labels]
    if len(labels) != num_classes:
        raise ValueError(
            f"{len(labels)} labels {labels} were given for a classifier of {num_classes} classes; "
            "give one name per class, in class-id order"
        )
    if len(set(labels)) != len(labels):
        raise ValueError(f"the label names {labels} repeat a name; label2id needs distinct names")
    return {str(i): label for i, label in enumerate(labels)}, {label: i for i, label in enumerate(labels)}


def set_token_ids(config: dict, token_ids: dict[str, int | None]) -> None:
    for key, value in token_ids.items():
        if key not in TOKEN_ID_KEYS:
            raise ValueError(f"unknown special-token id '{key}'; use {', '.join(TOKEN_ID_KEYS)}")
        if value is None:
            continue
        if config.get(key) is not None and config[key] != value:
            raise ValueError(f"{key}={value} from the tokenizer differs from the model's {key}={config[key]}")
        config[key] = int(value)
