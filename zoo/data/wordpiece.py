"""BERT's WordPiece tokenizer, with BERT's own normalization and pre-tokenization: trained with Hugging Face
`tokenizers`, or read from a vocab.txt or tokenizer.json, so that Hugging Face BERT weights and ours see the same ids.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from .atomic import atomic_write
from .prepare_lock import prepare_once

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)
# Part of the cached tokenizers' keys: bumped when `WordPieceTokenizer.train` changes what it returns.
TRAINING_REVISION = 2


class WordPieceTokenizer:
    kind = "wordpiece"

    def __init__(self, tokenizer: Tokenizer) -> None:
        missing = [t for t in SPECIAL_TOKENS if tokenizer.token_to_id(t) is None]
        if missing:
            raise ValueError(
                f"the WordPiece vocabulary lacks the special tokens {missing}; BERT needs {', '.join(SPECIAL_TOKENS)}"
            )
        self.tokenizer = tokenizer
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
            tokenizer.token_to_id(t) for t in SPECIAL_TOKENS
        )
        self.special_ids = frozenset((self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id))
        self.eos_id = None

    @staticmethod
    def _pipeline(tokenizer: Tokenizer, lowercase: bool) -> Tokenizer:
        # strip_accents=None follows `lowercase`, as in BERT's uncased/cased releases.
        tokenizer.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lowercase
        )
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tokenizer.decoder = decoders.WordPiece(prefix="##")
        return tokenizer

    @classmethod
    def train(cls, texts, vocab_size: int, *, lowercase: bool = True, min_frequency: int = 2) -> WordPieceTokenizer:
        """Learn a vocabulary of `vocab_size` entries (the five special tokens first: [PAD] is id 0) from an
        iterable of strings."""
        if vocab_size <= len(SPECIAL_TOKENS):
            raise ValueError(f"vocab_size must exceed the {len(SPECIAL_TOKENS)} special tokens, got {vocab_size}")
        texts = list(texts)
        tokenizer = cls._pipeline(Tokenizer(models.WordPiece(unk_token=UNK)), lowercase)
        # `tokenizers` (huggingface/tokenizers#1794) numbers the "##" continuation pieces in a hash map's order with
        # a per-process seed, and the numbers break ties between merges: two trainings on one text differed. Handing
        # the trainer every continuation piece up front, sorted, as "special tokens" fixes their numbers; the
        # tokenizer is rebuilt below without them (they are in the vocabulary either way).
        pieces = sorted(_continuation_pieces(tokenizer, texts))
        trainer = trainers.WordPieceTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=[*SPECIAL_TOKENS, *pieces],
            show_progress=False,
        )
        tokenizer.train_from_iterator(texts, trainer)
        vocab = tokenizer.get_vocab(with_added_tokens=False)
        rebuilt = cls._pipeline(Tokenizer(models.WordPiece(vocab, unk_token=UNK)), lowercase)
        rebuilt.add_special_tokens(list(SPECIAL_TOKENS))
        return cls(rebuilt)

    @classmethod
    def from_vocab_file(cls, path: str | Path, *, lowercase: bool | None = None) -> WordPieceTokenizer:
        """Read a BERT vocab.txt, or a Hugging Face BERT directory: its vocab.txt, else its tokenizer.json (transformers
        5 saves no vocab.txt). `lowercase=None` takes do_lower_case from a tokenizer_config.json beside it, else
        lowercases."""
        path = Path(path)
        if path.is_dir():
            if not (path / "vocab.txt").is_file() and (path / "tokenizer.json").is_file():
                return cls.from_tokenizer_file(path / "tokenizer.json", lowercase=lowercase)
            path = path / "vocab.txt"
        if not path.is_file():
            raise FileNotFoundError(
                f"vocab file not found: {path.resolve()}; a BERT tokenizer needs the vocab.txt or tokenizer.json of "
                "its checkpoint (Hugging Face BERT directories have one), or leave the vocab file unset to train a "
                "WordPiece"
            )
        if lowercase is None:
            lowercase = _config_lowercase(path.parent)
        vocab = models.WordPiece.read_file(str(path))
        return cls(
            cls._pipeline(Tokenizer(models.WordPiece(vocab, unk_token=UNK, max_input_chars_per_word=100)), lowercase)
        )

    @classmethod
    def from_tokenizer_file(cls, path: str | Path, *, lowercase: bool | None = None) -> WordPieceTokenizer:
        """Read the tokenizer.json of a Hugging Face BERT: its WordPiece vocabulary, with BERT's own normalizer and
        pre-tokenizer as from a vocab.txt. `lowercase=None` takes the file's normalizer setting, else
        do_lower_case of tokenizer_config.json."""
        path = Path(path)
        try:
            spec = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise ValueError(f"{path} is not a readable tokenizer.json ({error})") from error
        model = spec.get("model") or {}
        if model.get("type") != "WordPiece" or not isinstance(model.get("vocab"), dict):
            raise ValueError(f"{path} holds a {model.get('type')} tokenizer; a BERT needs a WordPiece tokenizer.json")
        if model.get("continuing_subword_prefix", "##") != "##":
            raise ValueError(f"{path} marks word continuations with {model['continuing_subword_prefix']!r}, not '##'")
        vocab = {str(token): int(i) for token, i in model["vocab"].items()}
        # Tokens added on top of the vocabulary are matched before WordPiece runs, which zoo's tokenizer does not do.
        extra = sorted(
            t["content"] for t in spec.get("added_tokens") or [] if vocab.get(t.get("content")) != t.get("id")
        )
        if extra:
            raise ValueError(
                f"{path} adds tokens outside its WordPiece vocabulary ({', '.join(extra[:5])}); zoo's BERT tokenizer "
                "reads the vocabulary only"
            )
        if lowercase is None:
            normalizer = spec.get("normalizer") or {}
            found = normalizer.get("lowercase") if normalizer.get("type") == "BertNormalizer" else None
            lowercase = bool(found) if found is not None else _config_lowercase(path.parent)
        wordpiece = models.WordPiece(
            vocab,
            unk_token=model.get("unk_token", UNK),
            max_input_chars_per_word=model.get("max_input_chars_per_word", 100),
        )
        return cls(cls._pipeline(Tokenizer(wordpiece), lowercase))

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    @property
    def lowercase(self) -> bool:
        return bool(json.loads(self.tokenizer.normalizer.__getstate__())["lowercase"])

    def encode(self, text: str) -> list[int]:
        """Ids of the text alone, without [CLS]/[SEP]."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]

    def build_pair(self, a: list[int], b: list[int] | None = None) -> tuple[list[int], list[int]]:
        """[CLS] A [SEP] (B [SEP]) and the segment ids: 0 up to and including the first [SEP], 1 after it."""
        ids = [self.cls_id, *a, self.sep_id]
        segments = [0] * len(ids)
        if b is not None:
            ids += [*b, self.sep_id]
            segments += [1] * (len(b) + 1)
        return ids, segments

    def decode(self, ids) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def save_vocab(self, directory: str | Path) -> Path:
        """Write vocab.txt (ids in line order), the file Hugging Face's BertTokenizer reads."""
        vocab = self.tokenizer.get_vocab()
        path = Path(directory) / "vocab.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(t + "\n" for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])), encoding="utf-8")
        return path

    def to_json(self) -> str:
        return json.dumps({"kind": self.kind, "tokenizer": self.tokenizer.to_str()})

    @classmethod
    def from_json(cls, data: str) -> WordPieceTokenizer:
        return cls(Tokenizer.from_str(json.loads(data)["tokenizer"]))


def cached_wordpiece(
    cache_dir: Path, name: str, key: list, texts: Callable[[], Iterable[str]], vocab_size: int, lowercase: bool
) -> WordPieceTokenizer:
    """A WordPiece trained on `texts()` once (by one process of a DDP job; the others wait) and cached under
    `cache_dir`, keyed by `key` (what decides the texts) and the training settings."""
    settings = json.dumps([*key, vocab_size, lowercase, TRAINING_REVISION]).encode()
    path = cache_dir / f"{name}-wordpiece{vocab_size}-{hashlib.sha256(settings).hexdigest()[:16]}" / "tokenizer.json"

    def train() -> None:
        atomic_write(path, WordPieceTokenizer.train(texts(), vocab_size, lowercase=lowercase).to_json())

    prepare_once(path, train, what="the WordPiece vocabulary")
    return WordPieceTokenizer.from_json(path.read_text(encoding="utf-8"))


def tokenizer_from_source(source: str | Path, *, lowercase: bool | None = None) -> WordPieceTokenizer:
    """The tokenizer of a pretrained model: a Hugging Face BERT directory (its vocab.txt or tokenizer.json), a
    vocab.txt, or a zoo checkpoint (.ckpt) that stores the tokenizer it was trained with."""
    path = Path(source)
    if path.is_file() and path.suffix == ".ckpt":
        from zoo.core.weights_file import torch_load_weights  # torch only here, when a checkpoint is read

        checkpoint = torch_load_weights(path)
        stored = checkpoint.get("zoo", {}).get("tokenizer") if isinstance(checkpoint, dict) else None
        if stored is None or json.loads(stored).get("kind") != WordPieceTokenizer.kind:
            raise ValueError(f"{path} stores no WordPiece tokenizer; it is not a zoo BERT checkpoint")
        return WordPieceTokenizer.from_json(stored)
    if not path.exists():
        raise FileNotFoundError(
            f"pretrained model not found: {path.resolve()}; give a Hugging Face BERT directory "
            "or a zoo checkpoint (.ckpt)"
        )
    return WordPieceTokenizer.from_vocab_file(path, lowercase=lowercase)


def _config_lowercase(directory: Path) -> bool:
    """do_lower_case of a tokenizer_config.json in `directory`; without one, lowercase."""
    config = directory / "tokenizer_config.json"
    return bool(json.loads(config.read_text()).get("do_lower_case", True)) if config.is_file() else True


def _continuation_pieces(tokenizer: Tokenizer, texts: list[str]) -> set[str]:
    """The continuation piece "##c" of every character c that follows another inside a pre-tokenized word."""
    pieces = set()
    for text in texts:
        normalized = tokenizer.normalizer.normalize_str(text)
        for word, _ in tokenizer.pre_tokenizer.pre_tokenize_str(normalized):
            pieces.update(word[1:])
    return {f"##{c}" for c in pieces}
