"""A transformer-zoo translation tokenizer with separate source and target vocabularies (AutoTokenizer with
trust_remote_code=True), used as Marian's is: `tokenizer(src)` encodes sources, `tokenizer(text_target=tgt)`
targets, and `decode` reads target ids. The two sides are source_tokenizer.json and target_tokenizer.json, whose
post-processors append EOS; both hold the special tokens at the same ids (pad 0, bos 1, eos 2, unk 3)."""

from __future__ import annotations

import os

from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast

FILES = {"source_file": "source_tokenizer.json", "target_file": "target_tokenizer.json"}


class ZooTranslationTokenizer(PreTrainedTokenizerFast):
    vocab_files_names = FILES
    model_input_names = ["input_ids", "attention_mask"]

    @classmethod
    def convert_to_native_format(cls, trust_remote_code=False, **kwargs):
        # The base class would rebuild one backend from tokenizer.json; both sides are read in __init__ instead.
        return kwargs

    def __init__(self, source_file=None, target_file=None, source_lang=None, target_lang=None, **kwargs):
        source, target = Tokenizer.from_file(source_file), Tokenizer.from_file(target_file)
        # The encoding backend is swapped between the sides: the base class encodes with self._tokenizer.
        self._target = target
        super().__init__(tokenizer_object=source, source_lang=source_lang, target_lang=target_lang, **kwargs)
        self._source = self._tokenizer  # the base class's copy, which holds what it registered
        self.source_lang, self.target_lang = source_lang, target_lang

    def _switch_to_input_mode(self):
        self._tokenizer = self._source

    def _switch_to_target_mode(self):
        self._tokenizer = self._target

    def convert_ids_to_tokens(self, ids, skip_special_tokens=False):
        # Ids to read are what the model generates: target ids, as Marian's are.
        single = isinstance(ids, int)
        ids = [ids] if single else ids
        tokens = [
            self._target.id_to_token(int(i))
            for i in ids
            if not (skip_special_tokens and int(i) in self.all_special_ids)
        ]
        return tokens[0] if single else tokens

    def _decode(self, token_ids, skip_special_tokens=False, clean_up_tokenization_spaces=None, **kwargs):
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        token_ids = [int(i) for i in token_ids]
        if not skip_special_tokens:  # every token as it is, as transformers decodes
            return self._target.decode(token_ids, skip_special_tokens=False)
        # zoo's TranslationTokenizer.decode: the text stops at the first EOS, padding and BOS are dropped, and an
        # unknown token stays visible as <unk> (dropping it would hide that the model produced one).
        kept = []
        for i in token_ids:
            if i == self.eos_token_id:
                break
            if i not in (self.pad_token_id, self.bos_token_id):
                kept.append(i)
        return self._target.decode(kept, skip_special_tokens=False)

    def _save_pretrained(self, save_directory, file_names, legacy_format=None, filename_prefix=None):
        # Both sides are written (the base class would write the encoding side alone, as tokenizer.json).
        prefix = filename_prefix + "-" if filename_prefix else ""
        written = []
        for backend, name in ((self._source, FILES["source_file"]), (self._target, FILES["target_file"])):
            path = os.path.join(str(save_directory), prefix + name)
            backend.save(path)
            written.append(path)
        return tuple(file_names) + tuple(written)
