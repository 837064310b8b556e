"""A zoo tokenizer (the JSON a checkpoint stores) as the tokenizer files `AutoTokenizer.from_pretrained(dir)` reads,
giving the ids zoo's own tokenizer gives:
- "bpe": GPT2Tokenizer (tokenizer.json, vocab.json + merges.txt), `<|endoftext|>` as bos, eos, unk and pad.
- "wordpiece": BertTokenizer (tokenizer.json, vocab.txt), with BERT's `[CLS] A [SEP] (B [SEP])` post-processor.
- "char": no such class in transformers: a WordLevel tokenizer.json over the characters that isolates and joins
  every character, read by PreTrainedTokenizerFast; the newline stands for its special tokens (`char_special`).
- "translation_bpe": one tokenizer.json that appends EOS as zoo's encode_source does, or with separate source and
  target vocabularies two files and a tokenizer class of its own (trust_remote_code=True).
Only the `tokenizers` library is needed, not zoo.data."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors

EOS = "<|endoftext|>"
BERT_SPECIAL = dict(unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]", cls_token="[CLS]", mask_token="[MASK]")
# The tokenizer class of separate source and target vocabularies: a template of zoo/interop/remote.
TRANSLATION_CODE = "zoo_translation_tokenizer.py"
TRANSLATION_CLASS = "ZooTranslationTokenizer"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "vocab.txt",
    "source_tokenizer.json",
    "target_tokenizer.json",
    TRANSLATION_CODE,
)


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def _write_configs(
    directory: Path, tokenizer_class: str, special: dict[str, str], model_max_length: int, **options
) -> None:
    _write_json(
        directory / "tokenizer_config.json",
        {"tokenizer_class": tokenizer_class, "model_max_length": model_max_length, **special, **options},
    )
    _write_json(directory / "special_tokens_map.json", special)


def _bpe(spec: dict, directory: Path, model_max_length: int) -> dict[str, int | None]:
    tokenizer = Tokenizer.from_str(spec["tokenizer"])
    eos = tokenizer.token_to_id(EOS)
    if eos is None:
        raise ValueError(f"the BPE tokenizer has no {EOS} token; zoo's BPE always has one (was it trained elsewhere?)")
    # GPT-2's own tokenizer.json has this post-processor: ids are unchanged, offsets keep their leading space.
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    tokenizer.save(str(directory / "tokenizer.json"))
    tokenizer.model.save(str(directory))  # vocab.json + merges.txt
    special = {"bos_token": EOS, "eos_token": EOS, "unk_token": EOS, "pad_token": EOS}
    _write_configs(
        directory,
        "GPT2Tokenizer",
        special,
        model_max_length,
        add_prefix_space=False,
        add_bos_token=False,
        clean_up_tokenization_spaces=False,
        errors="replace",
    )
    return {"bos_token_id": eos, "eos_token_id": eos, "pad_token_id": eos}


def _wordpiece(spec: dict, directory: Path, model_max_length: int) -> dict[str, int | None]:
    tokenizer = Tokenizer.from_str(spec["tokenizer"])
    ids = {name: tokenizer.token_to_id(token) for name, token in BERT_SPECIAL.items()}
    missing = [BERT_SPECIAL[name] for name, i in ids.items() if i is None]
    if missing:
        raise ValueError(f"the WordPiece vocabulary lacks BERT's special tokens {missing}")
    cls, sep = BERT_SPECIAL["cls_token"], BERT_SPECIAL["sep_token"]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0",
        pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, ids["cls_token"]), (sep, ids["sep_token"])],
    )
    # Rows longer than the trained context were cut in training, longest segment first: so does tokenizer.json.
    tokenizer.enable_truncation(max_length=model_max_length, strategy="longest_first")
    tokenizer.save(str(directory / "tokenizer.json"))
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    (directory / "vocab.txt").write_text("".join(token + "\n" for token, _ in vocab), encoding="utf-8")
    lowercase = bool(json.loads(tokenizer.normalizer.__getstate__())["lowercase"])
    _write_configs(
        directory,
        "BertTokenizer",
        dict(BERT_SPECIAL),
        model_max_length,
        do_lower_case=lowercase,
        strip_accents=None,
        tokenize_chinese_chars=True,
        clean_up_tokenization_spaces=True,
    )
    return {"pad_token_id": ids["pad_token"], "bos_token_id": None, "eos_token_id": None}


def char_special(chars: str) -> str:
    """The character that is the bos, eos, unk and pad token of an exported character tokenizer: the newline (the
    first character of the vocabulary if it has none).

    A character model has no row for a special token, and one cannot be added faithfully (a tied GPT2LMHeadModel
    has no output bias, so an extra row's logit would change the softmax over the real characters). So the special
    tokens are a character the model has, as GPT-2's <|endoftext|> is its bos, eos and unk: the line break is the
    context lm-eval's rolling windows start from, and an unseen character reads as a line break. The cost:
    `decode(..., skip_special_tokens=True)`, the text-generation pipeline's default, drops newlines."""
    return "\n" if "\n" in chars else chars[0]


def _char(spec: dict, directory: Path, model_max_length: int) -> dict[str, int | None]:
    chars = spec["chars"]
    special = char_special(chars)
    vocab = {c: i for i, c in enumerate(chars)}
    # Only the WordLevel unk here, not an added token: the `tokenizers` library's decode keeps newlines.
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=special))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # one piece per character
    tokenizer.decoder = decoders.Fuse()  # "a", "b" -> "ab", not "a b"
    tokenizer.save(str(directory / "tokenizer.json"))
    names = dict.fromkeys(("bos_token", "eos_token", "unk_token", "pad_token"), special)
    _write_configs(directory, "PreTrainedTokenizerFast", names, model_max_length, clean_up_tokenization_spaces=False)
    i = vocab[special]
    return {"bos_token_id": i, "eos_token_id": i, "pad_token_id": i}


# zoo.data.translation_tokenizer's special tokens, at ids 0-3 in every vocabulary (in this order).
TRANSLATION_SPECIAL = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}


def _translation_side(source: str, directory: Path, filename: str) -> None:
    """One side of a translation vocabulary as a `tokenizers` file whose post-processor appends EOS, as zoo's
    encode_source does for the encoder (and, for `text_target=`, gives the labels y + EOS a seq2seq loss reads)."""
    tokenizer = Tokenizer.from_str(source)
    eos = TRANSLATION_SPECIAL["eos_token"]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {eos}", pair=f"$A {eos} $B {eos}", special_tokens=[(eos, tokenizer.token_to_id(eos))]
    )
    tokenizer.save(str(directory / filename))


def _translation(spec: dict, directory: Path, model_max_length: int) -> dict[str, int | None]:
    """A joint translation vocabulary: one tokenizer.json (PreTrainedTokenizerFast). Separate vocabularies: a file per
    side and the tokenizer class that switches between them (TRANSLATION_CODE, remote code, as Marian's)."""
    options = dict(
        clean_up_tokenization_spaces=False, source_lang=spec.get("source_lang"), target_lang=spec.get("target_lang")
    )
    if spec.get("target") is None:
        _translation_side(spec["source"], directory, "tokenizer.json")
        _write_configs(directory, "PreTrainedTokenizerFast", dict(TRANSLATION_SPECIAL), model_max_length, **options)
    else:
        _translation_side(spec["source"], directory, "source_tokenizer.json")
        _translation_side(spec["target"], directory, "target_tokenizer.json")
        code = (resources.files("zoo.interop") / "remote" / TRANSLATION_CODE).read_text(encoding="utf-8")
        (directory / TRANSLATION_CODE).write_text(code, encoding="utf-8")
        module = TRANSLATION_CODE.removesuffix(".py")
        # transformers' convention for a tokenizer's own code: [slow class, fast class]; this one is fast only.
        auto_map = {"AutoTokenizer": [None, f"{module}.{TRANSLATION_CLASS}"]}
        _write_configs(
            directory, TRANSLATION_CLASS, dict(TRANSLATION_SPECIAL), model_max_length, auto_map=auto_map, **options
        )
    return {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}  # TRANSLATION_SPECIAL's ids


_WRITERS = {"bpe": _bpe, "wordpiece": _wordpiece, "char": _char, "translation_bpe": _translation}


def save_tokenizer(tokenizer_json: str, directory: str | Path, *, model_max_length: int) -> dict[str, int | None]:
    """Write the tokenizer files for the zoo tokenizer `tokenizer_json` into `directory`; returns the special-token
    ids (bos/eos/pad, None where the tokenizer has none) that config.json and generation_config.json need."""
    spec = json.loads(tokenizer_json)
    kind = spec.get("kind")
    if kind not in _WRITERS:
        raise ValueError(f"tokenizer kind {kind!r} cannot be exported; zoo exports {', '.join(_WRITERS)}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    return _WRITERS[kind](spec, directory, model_max_length)
