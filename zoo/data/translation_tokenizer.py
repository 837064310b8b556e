"""Subword tokenizers for translation: BPE trained with Hugging Face `tokenizers`, joint or one per language.

Text is NFKC-normalized, split at whitespace (kept as a leading "▁", SentencePiece's convention) and around
punctuation; decoding turns "▁" back into spaces, so detokenized output is plain text that sacreBLEU can score.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

# The same ids in every vocabulary (joint or per language): the model's config relies on them.
SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")
PAD_ID, BOS_ID, EOS_ID, UNK_ID = range(4)


def train_bpe(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """A BPE over the given sentences with the special tokens at ids 0-3."""
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always"),
            pre_tokenizers.Punctuation(behavior="isolated"),
        ]
    )
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False)
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


class TranslationTokenizer:
    """A source and a target subword tokenizer; with a joint vocabulary both are the same object."""

    kind = "translation_bpe"
    pad_id, bos_id, eos_id, unk_id = PAD_ID, BOS_ID, EOS_ID, UNK_ID

    def __init__(self, source: Tokenizer, target: Tokenizer, source_lang: str, target_lang: str) -> None:
        self.source, self.target = source, target
        self.source_lang, self.target_lang = source_lang, target_lang

    @classmethod
    def train(
        cls,
        source_texts: list[str],
        target_texts: list[str],
        *,
        vocab_size: int,
        joint: bool,
        source_lang: str,
        target_lang: str,
    ) -> TranslationTokenizer:
        """joint: one BPE of `vocab_size` over both languages; else one of `vocab_size` per language."""
        if joint:
            shared = train_bpe(source_texts + target_texts, vocab_size)
            return cls(shared, shared, source_lang, target_lang)
        return cls(train_bpe(source_texts, vocab_size), train_bpe(target_texts, vocab_size), source_lang, target_lang)

    @property
    def joint(self) -> bool:
        return self.source is self.target

    @property
    def src_vocab_size(self) -> int:
        return self.source.get_vocab_size()

    @property
    def tgt_vocab_size(self) -> int:
        return self.target.get_vocab_size()

    def encode_source(self, text: str) -> list[int]:
        """Subword ids followed by EOS (the encoder sees where the sentence ends, as in fairseq)."""
        return self.source.encode(text).ids + [EOS_ID]

    def unknown_source_characters(self, text: str) -> list[str]:
        """The characters of `text` that the source vocabulary lacks (each would be encoded as <unk>), sorted."""
        encoding = self.source.encode(text)
        return sorted({text[a:b] for i, (a, b) in zip(encoding.ids, encoding.offsets) if i == UNK_ID})

    def encode_target(self, text: str) -> list[int]:
        """Subword ids without BOS/EOS; the task builds decoder inputs (BOS + y) and labels (y + EOS)."""
        return self.target.encode(text).ids

    def encode_source_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids + [EOS_ID] for e in self.source.encode_batch(texts)]

    def encode_target_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.target.encode_batch(texts)]

    def decode(self, ids) -> str:
        """Target ids -> detokenized text; stops at the first EOS, drops padding and BOS."""
        kept = []
        for i in ids:
            i = int(i)
            if i == EOS_ID:
                break
            if i not in (PAD_ID, BOS_ID):
                kept.append(i)
        return self.target.decode(kept, skip_special_tokens=False)

    def to_json(self) -> str:
        return json.dumps(
            {
                "kind": self.kind,
                "source_lang": self.source_lang,
                "target_lang": self.target_lang,
                "source": self.source.to_str(),
                "target": None if self.joint else self.target.to_str(),
            }
        )

    @classmethod
    def from_json(cls, data: str) -> TranslationTokenizer:
        spec = json.loads(data)
        if spec.get("kind") != cls.kind:
            raise ValueError(f"not a translation tokenizer (kind {spec.get('kind')!r}, expected {cls.kind!r})")
        source = Tokenizer.from_str(spec["source"])
        target = source if spec["target"] is None else Tokenizer.from_str(spec["target"])
        return cls(source, target, spec["source_lang"], spec["target_lang"])
