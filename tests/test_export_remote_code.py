"""Models that no native Hugging Face class computes (a lab switch on) export with their own modelling code:
transformers loads the directory with trust_remote_code=True and gives zoo's logits and greedy tokens, generation
past the trained context slides its window as zoo's does, the exports below set every switch of the core, and the
code written there is zoo's own source (zoo/core, zoo/models, only the imports made relative) and imports no zoo."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import subprocess
import sys

import pytest
import torch

transformers = pytest.importorskip("transformers")

from PIL import Image  # noqa: E402

import zoo.core.switches  # noqa: E402
from zoo.core import (  # noqa: E402
    ATTN_SCALES,
    ATTN_SCORES,
    FF_INNER_NORMS,
    NORMS,
    POSITION_MERGES,
    POSITIONS,
    QK_PROJS,
    Switches,
    switch_names,
)
from zoo.data import CharTokenizer, TranslationTokenizer, WordPieceTokenizer  # noqa: E402
from zoo.interop import export_hf  # noqa: E402
from zoo.interop.exportable import check_native  # noqa: E402
from zoo.models import BERT, GPT, Transformer, ViT  # noqa: E402

TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\nAll:\nSpeak, speak.\n"
CONTEXT = 16
# Every switch of the core on a GPT, spread over a few models (some exclude each other: rope vs alibi...).
GPT_SWITCHES = {
    "recipe": dict(activation="relu2", positions="rope", qk_norm=True),  # gpt_shakespeare_char_fast's model
    "alibi_window_additive": dict(positions="alibi", attn_window=5, attn_score="additive", attn_scale="none"),
    "sinusoid_concat_shared_bn": dict(
        positions="sinusoidal",
        position_merge="concat",
        qk_proj="shared",
        norm="batchnorm_masked",
        ff_inner_norm="layernorm",
        residual_attn=False,
        sinusoid_base=500.0,
    ),
    "learned_untied_noproj": dict(
        qk_proj="none",
        n_inner=300,  # lab/qk_proj's parameter-matched arms widen the FFN
        attn_scale=0.3,
        norm="batchnorm",
        ff_inner_norm="batchnorm",
        residual_ff=False,
        tie_weights=False,
        bias=False,
    ),
    "nonorm_window": dict(
        norm="none", attn_window=3, positions="none", activation="relu", ff_inner_norm="batchnorm_masked"
    ),
    "no_bias": dict(bias=False),  # no lab switch, but GPT2LMHeadModel always has biases
}


def char_tokenizer() -> CharTokenizer:
    return CharTokenizer.train(TEXT)


def jitter_norm_statistics(model: torch.nn.Module) -> None:
    """BatchNorm's running statistics start at mean 0 / variance 1, where a wrong normalization would go unseen."""
    torch.manual_seed(1)
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm1d):
            module.running_mean.normal_(0, 0.5)
            module.running_var.uniform_(0.5, 2.0)


def gpt(**switches) -> GPT:
    torch.manual_seed(0)
    model = GPT.from_preset("gpt-nano", vocab_size=char_tokenizer().vocab_size, block_size=CONTEXT, **switches)
    jitter_norm_statistics(model)
    return model.eval()


def load_causal_lm(directory):
    return transformers.AutoModelForCausalLM.from_pretrained(directory, trust_remote_code=True).eval()


@pytest.mark.parametrize("name", list(GPT_SWITCHES))
@torch.no_grad()
def test_gpt_with_switches_loads_with_zoo_logits_and_greedy_tokens(name, tmp_path):
    model, tokenizer = gpt(**GPT_SWITCHES[name]), char_tokenizer()
    with pytest.raises(ValueError, match="trust_remote_code"):
        check_native(model)  # no native class computes it
    files = export_hf(model, tmp_path, tokenizer_json=tokenizer.to_json())
    code = {"zoo_gpt.py", "zoo_hf.py", "zoo_models_gpt.py", "zoo_core.py", "zoo_core_attention.py"}
    assert code | {"config.json", "model.safetensors", "tokenizer.json"} <= set(files)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["auto_map"]["AutoModelForCausalLM"] == "zoo_gpt.ZooGPTForCausalLM"
    hf, info = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path, trust_remote_code=True, output_loading_info=True
    )
    hf.eval()
    assert not any(info.values()), info  # every weight copied straight across, none left over
    # zoo's GPT (the export's copy of zoo/models/gpt.py), built from config.json by its own config class.
    assert type(hf.zoo).__name__ == "GPT" and type(hf.zoo).__module__.endswith(".zoo_models_gpt")
    assert dataclasses.asdict(hf.zoo.config) == model.config_dict()

    ids = torch.tensor(
        [tokenizer.encode("Before we proceed"[:CONTEXT]), tokenizer.encode("All:\nSpeak, speak.")[:CONTEXT]]
    )
    torch.testing.assert_close(hf(ids).logits, model(ids), atol=1e-5, rtol=0)
    # Left padding: positions counted over the real tokens, padded keys hidden (the real rows are compared).
    mask = torch.ones_like(ids)
    mask[0, :4] = 0
    torch.testing.assert_close(
        hf(ids, attention_mask=mask).logits[mask.bool()],
        model(ids, attention_mask=mask)[mask.bool()],
        atol=1e-5,
        rtol=0,
    )
    # Greedy generation, in and past the trained context (no IndexError: the window slides as zoo's does).
    prompt = ids[:, :6]
    for new in (CONTEXT - 6, 3 * CONTEXT):
        ours = model.generate(prompt, new, temperature=0)
        theirs = hf.generate(prompt, max_new_tokens=new, do_sample=False, attention_mask=torch.ones_like(prompt))
        assert torch.equal(theirs, ours)


def test_gpt_export_tokenizer_limits_and_card_go_along(tmp_path):
    model, tokenizer = gpt(**GPT_SWITCHES["recipe"]), char_tokenizer()
    export_hf(model, tmp_path, tokenizer_json=tokenizer.to_json())
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path, trust_remote_code=True)
    assert hf_tokenizer("Speak")["input_ids"] == tokenizer.encode("Speak")
    assert hf_tokenizer.model_max_length == CONTEXT
    assert json.loads((tmp_path / "generation_config.json").read_text())["max_length"] == CONTEXT
    card = (tmp_path / "README.md").read_text()
    assert "trust_remote_code=True" in card and "positions='rope'" in card and "ZooGPTForCausalLM" in card
    generate = transformers.pipeline("text-generation", model=str(tmp_path), trust_remote_code=True)
    out = generate("Speak", do_sample=False, return_tensors=True)[0]["generated_token_ids"]
    assert len(out) == CONTEXT  # stops at the trained context (generation_config.json's max_length)


# ---- ViT ------------------------------------------------------------------------------------------------------
VIT_SWITCHES = {
    "recipe": dict(pool="avg", class_token=False, qk_norm=True),  # vit_mnist_fast's model (vit_mnist + QK-norm)
    "bn_vit_causal": dict(
        norm="batchnorm", ff_inner_norm="batchnorm", causal=True, pool="avg", activation="relu2", qk_proj="shared"
    ),
    "token_window_additive": dict(attn_window=6, attn_score="additive", residual_ff=False, attn_scale=0.5),
    # vit_mnist's model: no lab switch, but ViTForImageClassification has no average pooling
    "vit_mnist": dict(pool="avg", class_token=False),
}


def vit(**switches) -> ViT:
    torch.manual_seed(0)
    model = ViT.from_preset("vit-nano/4", image_size=16, in_channels=1, num_classes=3, **switches)
    jitter_norm_statistics(model)
    return model.eval()


@pytest.mark.parametrize("name", list(VIT_SWITCHES))
@torch.no_grad()
def test_vit_with_switches_loads_with_zoo_logits(name, tmp_path):
    model = vit(**VIT_SWITCHES[name])
    labels = ["zero", "one", "two"]
    export_hf(model, tmp_path, labels=labels, image_mean=[0.5], image_std=[0.25])
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["auto_map"]["AutoModelForImageClassification"] == "zoo_vit.ZooViTForImageClassification"
    hf, info = transformers.AutoModelForImageClassification.from_pretrained(
        tmp_path, trust_remote_code=True, output_loading_info=True
    )
    hf.eval()
    assert not any(info.values()), info
    assert hf.config.id2label == dict(enumerate(labels))
    gray = torch.rand(2, 1, 16, 16)
    # The grayscale model is exported as the equal 3-channel one (the image pipelines give RGB).
    torch.testing.assert_close(hf(gray.expand(-1, 3, -1, -1)).logits, model(gray), atol=1e-5, rtol=0)
    # The image processor goes along: a PIL image through the pipeline gives zoo's prediction.
    image = Image.fromarray((gray[0, 0].numpy() * 255).astype("uint8"))
    pixels = (torch.tensor(list(image.getdata()), dtype=torch.float32).view(1, 1, 16, 16) / 255 - 0.5) / 0.25
    classify = transformers.pipeline("image-classification", model=str(tmp_path), trust_remote_code=True)
    assert classify(image, top_k=1)[0]["label"] == labels[int(model(pixels).argmax())]


# ---- BERT -----------------------------------------------------------------------------------------------------
BERT_TEXTS = ["the film was a gripping ride", "a dull and tired story", "the cast was great", "it was not good"] * 4
BERT_SWITCHES = {
    "rope_qknorm": dict(positions="rope", qk_norm=True),
    "causal_alibi_window": dict(causal=True, positions="alibi", attn_window=3, qk_proj="none"),
    "sinusoid_bn": dict(positions="sinusoidal", norm="batchnorm_masked", ff_inner_norm="batchnorm", attn_scale="none"),
}


def bert(tokenizer, **options) -> BERT:
    torch.manual_seed(0)
    model = BERT.from_preset("bert-tiny", vocab_size=tokenizer.vocab_size, max_position_embeddings=32, **options)
    jitter_norm_statistics(model)
    return model.eval()


@pytest.mark.parametrize("name", list(BERT_SWITCHES))
@torch.no_grad()
def test_bert_pretraining_with_switches_loads_with_zoo_logits(name, tmp_path):
    tokenizer = WordPieceTokenizer.train(BERT_TEXTS, 120)
    model = bert(tokenizer, **BERT_SWITCHES[name])
    export_hf(model, tmp_path, tokenizer_json=tokenizer.to_json(), context_length=24)
    config = json.loads((tmp_path / "config.json").read_text())
    assert {"AutoModelForPreTraining", "AutoModelForMaskedLM"} <= set(config["auto_map"])
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path, trust_remote_code=True)
    assert hf_tokenizer.model_max_length == 24
    # The card's example passes the flag to the tokenizer too: transformers reads config.json (auto_map) for it.
    card = (tmp_path / "README.md").read_text()
    assert 'AutoTokenizer.from_pretrained("path/to/this/folder", trust_remote_code=True)' in card
    batch = hf_tokenizer(
        ["the film was great", "a dull story"], ["it was not", "the cast"], padding=True, return_tensors="pt"
    )
    for auto in (transformers.AutoModelForPreTraining, transformers.AutoModelForMaskedLM):
        hf = auto.from_pretrained(tmp_path, trust_remote_code=True).eval()
        ours = model(batch["input_ids"], token_type_ids=batch["token_type_ids"], attention_mask=batch["attention_mask"])
        theirs = hf(**batch)
        real = batch["attention_mask"].bool()
        torch.testing.assert_close(theirs.logits[real], ours.mlm_logits[real], atol=1e-5, rtol=0)
        torch.testing.assert_close(theirs.nsp_logits, ours.nsp_logits, atol=1e-5, rtol=0)


@torch.no_grad()
def test_bert_classifier_with_switches_classifies_as_zoo(tmp_path):
    tokenizer = WordPieceTokenizer.train(BERT_TEXTS, 120)
    model = bert(tokenizer, head="classification", positions="rope", qk_norm=True)
    export_hf(model, tmp_path, tokenizer_json=tokenizer.to_json(), labels=["negative", "positive"])
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path, trust_remote_code=True).eval()
    ids = transformers.AutoTokenizer.from_pretrained(tmp_path, trust_remote_code=True)(
        "the cast was great", return_tensors="pt"
    ).input_ids
    assert ids[0].tolist() == tokenizer.build_pair(tokenizer.encode("the cast was great"))[0]  # zoo's row
    torch.testing.assert_close(hf(ids).logits, model(ids).logits, atol=1e-5, rtol=0)
    classify = transformers.pipeline("text-classification", model=str(tmp_path), trust_remote_code=True)
    assert classify("the cast was great")[0]["label"] == ["negative", "positive"][int(model(ids).logits.argmax())]


# ---- the encoder-decoder Transformer --------------------------------------------------------------------------
SOURCES = ["zwei junge männer gehen.", "ein hund läuft im park.", "eine frau liest ein buch."] * 3
TARGETS = ["two young men walk.", "a dog runs in the park.", "a woman reads a book."] * 3
TRANSFORMER_SWITCHES = {
    "reference": {},  # torch.nn.Transformer's layout: no native transformers class computes even this
    "rope_qknorm_prelN": dict(positions="rope", qk_norm=True, norm_first=True, activation="relu2"),
    "learned_concat_causal_window": dict(
        positions="learned", position_merge="concat", encoder_causal=True, attn_window=3, qk_proj="shared"
    ),
}


def translation_tokenizer(joint: bool = True) -> TranslationTokenizer:
    return TranslationTokenizer.train(SOURCES, TARGETS, vocab_size=80, joint=joint, source_lang="de", target_lang="en")


def transformer(tokenizer, **switches) -> Transformer:
    torch.manual_seed(0)
    # Separate vocabularies need their own target size and embeddings (one shared matrix needs a joint vocabulary).
    sides = {} if tokenizer.joint else dict(tgt_vocab_size=tokenizer.tgt_vocab_size, share_embeddings=False)
    model = Transformer.from_preset(
        "transformer-tiny", src_vocab_size=tokenizer.src_vocab_size, max_len=12, **sides, **switches
    ).eval()
    with torch.no_grad():  # away from the fresh init, whose greedy output is one token over and over
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    return model


@pytest.mark.parametrize("name", list(TRANSFORMER_SWITCHES))
@torch.no_grad()
def test_transformer_loads_as_seq2seq_lm_with_zoo_logits_and_translations(name, tmp_path):
    tokenizer = translation_tokenizer()
    model = transformer(tokenizer, **TRANSFORMER_SWITCHES[name])
    export_hf(model, tmp_path, tokenizer_json=tokenizer.to_json())
    hf, info = transformers.AutoModelForSeq2SeqLM.from_pretrained(
        tmp_path, trust_remote_code=True, output_loading_info=True
    )
    hf.eval()
    assert not any(info.values()), info
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path, trust_remote_code=True)
    texts = ["zwei junge hunde.", "ein mann liest im park."]
    assert [hf_tokenizer(t)["input_ids"] for t in texts] == [tokenizer.encode_source(t) for t in texts]
    batch = hf_tokenizer(texts, padding=True, return_tensors="pt")  # right padding, as zoo's collator
    src, src_mask = batch["input_ids"], batch["attention_mask"]
    tgt = torch.tensor([[1, *tokenizer.encode_target("two young dogs")[:5]]] * 2)
    torch.testing.assert_close(
        hf(**batch, decoder_input_ids=tgt).logits, model(src, tgt, src_mask=src_mask), atol=1e-5, rtol=0
    )
    # Greedy translation: zoo's ids after BOS, to EOS and padded after it, the same text decoded.
    ours = model.generate(src, src_mask, max_new_tokens=10)
    theirs = hf.generate(**batch, max_new_tokens=10)
    assert theirs[:, 0].tolist() == [1, 1]  # BOS first, as every transformers seq2seq output
    assert torch.equal(theirs[:, 1 : 1 + ours.shape[1]], ours)
    assert (theirs[:, 1 + ours.shape[1] :] == 0).all()
    decoded = hf_tokenizer.batch_decode(theirs, skip_special_tokens=True)
    assert decoded == [tokenizer.decode(row) for row in ours]
    # Past the positions: zoo refuses, and so does the export, with a message naming max_len (no IndexError).
    if model.config.positions in ("learned", "sinusoidal"):
        assert json.loads((tmp_path / "generation_config.json").read_text())["max_length"] == 13
        with pytest.raises(ValueError, match="max_len"):
            model.generate(src, src_mask, max_new_tokens=20)
        with pytest.raises(ValueError, match="max_len=12"):
            hf.generate(**batch, max_new_tokens=20, eos_token_id=None, min_new_tokens=20)
    else:  # rope: no length limit, as zoo's
        long = hf.generate(**batch, max_new_tokens=20, min_new_tokens=20)
        assert long.shape[1] == 21


@torch.no_grad()
def test_two_sided_translation_tokenizer_goes_along_as_one_tokenizer(tmp_path):
    """Separate source and target vocabularies: one tokenizer object of its own code, used as Marian's is."""
    tokenizer = translation_tokenizer(joint=False)
    model = transformer(tokenizer)
    files = export_hf(model, tmp_path, tokenizer_json=tokenizer.to_json())
    assert {"source_tokenizer.json", "target_tokenizer.json", "zoo_translation_tokenizer.py"} <= set(files)
    assert "tokenizer.json" not in files  # no one-vocabulary file that a reader could take for both sides
    auto_map = json.loads((tmp_path / "tokenizer_config.json").read_text())["auto_map"]
    assert auto_map == {"AutoTokenizer": [None, "zoo_translation_tokenizer.ZooTranslationTokenizer"]}
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path, trust_remote_code=True)
    hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path, trust_remote_code=True).eval()
    texts = ["zwei junge hunde.", "ein mann liest im park.", "eine frau geht."]
    assert [hf_tokenizer(t)["input_ids"] for t in texts] == [tokenizer.encode_source(t) for t in texts]
    targets = ["two young dogs.", "a man reads in the park."]
    bare = [hf_tokenizer(text_target=t, add_special_tokens=False)["input_ids"] for t in targets]
    assert bare == [tokenizer.encode_target(t) for t in targets]
    # With its special tokens a target is the labels zoo's task builds (y + EOS), as with a joint vocabulary.
    labels = [hf_tokenizer(text_target=t)["input_ids"] for t in targets]
    assert labels == [tokenizer.encode_target(t) + [tokenizer.eos_id] for t in targets]
    # The sides are different vocabularies: the same text has other ids on each (else the check above is moot).
    assert hf_tokenizer(targets[0])["input_ids"] != labels[0]
    assert hf_tokenizer(texts[0])["input_ids"] == tokenizer.encode_source(texts[0])  # back to the source side

    batch = hf_tokenizer(texts, padding=True, return_tensors="pt")
    src, src_mask = batch["input_ids"], batch["attention_mask"]
    tgt = torch.tensor([[tokenizer.bos_id, *tokenizer.encode_target("two young dogs")[:5]]] * len(texts))
    torch.testing.assert_close(
        hf(**batch, decoder_input_ids=tgt).logits, model(src, tgt, src_mask=src_mask), atol=1e-5, rtol=0
    )
    ours = model.generate(src, src_mask, max_new_tokens=10)
    theirs = hf.generate(**batch, max_new_tokens=10)
    assert torch.equal(theirs[:, 1 : 1 + ours.shape[1]], ours)
    decoded = hf_tokenizer.batch_decode(theirs, skip_special_tokens=True)
    assert decoded == [tokenizer.decode(row) for row in ours]
    assert any(decoded)  # some text came out, so the target side did the decoding
    card = (tmp_path / "README.md").read_text()  # the card's example loads the tokenizer's code as well
    assert 'AutoTokenizer.from_pretrained("path/to/this/folder", trust_remote_code=True)' in card
    # Saved again by transformers (a fine-tuner's save_pretrained), both sides and the class go along.
    hf_tokenizer.save_pretrained(tmp_path / "again")
    again = transformers.AutoTokenizer.from_pretrained(tmp_path / "again", trust_remote_code=True)
    assert [again(t)["input_ids"] for t in texts] == [tokenizer.encode_source(t) for t in texts]
    assert [again(text_target=t)["input_ids"] for t in targets] == labels


def test_zoo_export_writes_a_two_sided_checkpoints_tokenizer_without_a_note(tmp_path, capsys):
    """zoo-export hands the checkpoint's two-sided tokenizer on (it used to drop it with a note)."""
    from functools import partial

    from zoo.entry.export import main as export_main
    from zoo.tasks import Seq2SeqTask

    tokenizer = translation_tokenizer(joint=False)
    task = Seq2SeqTask(transformer(tokenizer), partial(torch.optim.AdamW, lr=1e-3), tokenizer=tokenizer)
    checkpoint = {"state_dict": task.state_dict()}
    task.on_save_checkpoint(checkpoint)  # the "zoo" section, tokenizer JSON included, as a fit writes it
    torch.save(checkpoint, tmp_path / "two_sided.ckpt")
    export_main([str(tmp_path / "two_sided.ckpt"), str(tmp_path / "out")])
    out = capsys.readouterr()
    assert "source_tokenizer.json" in out.out and "vocabularies" not in out.out + out.err
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "out", trust_remote_code=True)
    assert hf_tokenizer("ein hund.")["input_ids"] == tokenizer.encode_source("ein hund.")


@torch.no_grad()
def test_models_without_a_head_load_as_auto_model(tmp_path):
    features = ViT.from_preset("vit-nano/4", image_size=16, num_classes=0).eval()  # pooled features
    export_hf(features, tmp_path / "vit")
    assert "AutoModel" in json.loads((tmp_path / "vit" / "config.json").read_text())["auto_map"]
    images = torch.randn(2, 3, 16, 16)
    hf = transformers.AutoModel.from_pretrained(tmp_path / "vit", trust_remote_code=True).eval()
    torch.testing.assert_close(hf(images).logits, features(images), atol=1e-5, rtol=0)

    encoder = bert(WordPieceTokenizer.train(BERT_TEXTS, 120), head="none", qk_norm=True)
    export_hf(encoder, tmp_path / "bert")
    hf = transformers.AutoModel.from_pretrained(tmp_path / "bert", trust_remote_code=True).eval()
    ids = torch.tensor([[2, 10, 11, 12, 3]])
    out, ours = hf(ids), encoder(ids)
    torch.testing.assert_close(out.last_hidden_state, ours.hidden, atol=1e-5, rtol=0)
    torch.testing.assert_close(out.pooler_output, ours.pooled, atol=1e-5, rtol=0)


# ---- the fast recipes' models, as their configs build them ------------------------------------------------------
def recipe_net(experiment: str, **data_options):
    """model.net of `experiment=<experiment>`, built with the sizes its data would give (random weights)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.utils import instantiate

    from conftest import ROOT

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "zoo" / "conf"), version_base="1.3"):
        net = compose(config_name="train", overrides=[f"experiment={experiment}"]).model.net
    GlobalHydra.instance().clear()
    torch.manual_seed(0)
    return instantiate(net, **data_options).eval()


@torch.no_grad()
def test_the_fast_recipes_models_export(tmp_path):
    model = recipe_net("gpt_shakespeare_char_fast", vocab_size=char_tokenizer().vocab_size)
    assert model.nondefault_switches() == {"positions": "rope", "qk_norm": True}
    assert model.config.activation == "relu2"
    export_hf(model, tmp_path / "gpt", tokenizer_json=char_tokenizer().to_json())
    hf = load_causal_lm(tmp_path / "gpt")
    ids = torch.tensor([char_tokenizer().encode(TEXT[:40])])
    torch.testing.assert_close(hf(ids).logits, model(ids), atol=1e-5, rtol=0)

    model = recipe_net("vit_mnist_fast", image_size=28, in_channels=1, num_classes=10)
    assert model.nondefault_switches() == {"qk_norm": True} and model.config.pool == "avg"
    export_hf(model, tmp_path / "vit", image_mean=[0.1307], image_std=[0.3081])
    hf = transformers.AutoModelForImageClassification.from_pretrained(tmp_path / "vit", trust_remote_code=True)
    digits = torch.randn(2, 1, 28, 28)
    torch.testing.assert_close(hf.eval()(digits.expand(-1, 3, -1, -1)).logits, model(digits), atol=1e-5, rtol=0)


# ---- every switch, zoo's own code -------------------------------------------------------------------------------
NUMBER = "a number"  # a switch that takes numbers: one of them exercises its code path
# Each lab switch (the groups of zoo.core.switches, and the models' own) and the values it takes (from the core's
# own lists).
SWITCH_VALUES = {
    "positions": POSITIONS,
    "position_merge": POSITION_MERGES,
    "sinusoid_base": (NUMBER,),
    "attn_scale": (*ATTN_SCALES, NUMBER),
    "attn_score": ATTN_SCORES,
    "qk_proj": QK_PROJS,
    "attn_window": (None, NUMBER),
    "qk_norm": (False, True),
    "norm": NORMS,
    "ff_inner_norm": FF_INNER_NORMS,
    "residual_attn": (False, True),
    "residual_ff": (False, True),
    "causal": (False, True),
    "encoder_causal": (False, True),  # the Transformer's (zoo/models/transformer.py)
}


def switch_values(model) -> set[tuple[str, object]]:
    """(switch, value) of every lab switch of `model`'s config, a number standing as NUMBER."""
    values = set()
    for name in switch_names(type(model.config)):
        value = getattr(model.config, name)
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        values.add((name, NUMBER if number else value))
    return values


def test_the_exports_above_set_every_switch_to_every_value():
    """Each parametrised export above gives zoo's logits; together they set every switch of the core to each of its
    values (GPT, which has every group but CausalSwitch, all of them on its own), so every switch exports."""
    groups = [c for c in vars(zoo.core.switches).values() if isinstance(c, type) and Switches in c.__bases__]
    defined = {f.name for group in groups for f in dataclasses.fields(group)}  # the core's, and the models' own:
    defined |= set().union(*(switch_names(model.config_class) for model in (GPT, BERT, ViT, Transformer)))
    assert set(SWITCH_VALUES) == defined, "a new switch: list its values here and export a model with it above"
    every = {(name, value) for name, values in SWITCH_VALUES.items() for value in values}
    on_gpt = set().union(*(switch_values(gpt(**options)) for options in GPT_SWITCHES.values()))
    assert on_gpt == {(name, value) for name, value in every if name in switch_names(GPT.config_class)}
    wordpiece, translation = WordPieceTokenizer.train(BERT_TEXTS, 120), translation_tokenizer()
    models = [vit(**options) for options in VIT_SWITCHES.values()]
    models += [bert(wordpiece, **options) for options in BERT_SWITCHES.values()]
    models += [transformer(translation, **options) for options in TRANSFORMER_SWITCHES.values()]
    assert on_gpt.union(*map(switch_values, models)) == every


def zoo_source(name: str) -> str:
    """The zoo module that an exported file copies: zoo_core_attention.py -> zoo/core/attention.py."""
    from conftest import ROOT

    package, _, module = name.removesuffix(".py").removeprefix("zoo_").partition("_")
    return (ROOT / "zoo" / package / f"{module or '__init__'}.py").read_text()


def made_relative(source: str, package: str) -> str:
    """`source` with each import of a zoo module made a relative import of its exported name (flat: zoo.core.x is
    zoo_core_x), written out here independently of zoo.interop.remote_code."""

    def flat(match: re.Match) -> str:
        module = match[2].replace("zoo.", "zoo_") if match[2].startswith("zoo.") else f"zoo_{package}_{match[2][1:]}"
        return f"{match[1]}from .{module} import"

    return re.sub(r"^(\s*)from (zoo\.\w+|\.\w+) import", flat, source, flags=re.M)


def test_the_exported_modelling_code_is_zoos_own_source(tmp_path):
    from conftest import ROOT

    export_hf(gpt(**GPT_SWITCHES["recipe"]), tmp_path / "gpt")
    # zoo/core/attention.py, byte for byte, but for its imports of the core's other modules.
    attention = (ROOT / "zoo" / "core" / "attention.py").read_text()
    assert "from .kv_cache import LayerCache\n" in attention
    expected = attention.replace("from .kv_cache import", "from .zoo_core_kv_cache import")
    expected = expected.replace("from .masks import", "from .zoo_core_masks import")
    expected = expected.replace("from .positions import", "from .zoo_core_positions import")
    expected = expected.replace("from .window import", "from .zoo_core_window import")
    assert (tmp_path / "gpt" / "zoo_core_attention.py").read_text() == expected
    models = (
        vit(qk_norm=True),
        bert(WordPieceTokenizer.train(BERT_TEXTS, 120), qk_norm=True),
        transformer(translation_tokenizer()),
    )
    for model in models:
        export_hf(model, tmp_path / model.model_type)
    templates = {p.name: p.read_text() for p in (ROOT / "zoo" / "interop" / "remote").glob("*.py")}
    for directory in tmp_path.iterdir():
        written = {p.name: p.read_text() for p in directory.glob("*.py")}
        copies = {name for name in written if name not in templates}
        assert f"zoo_models_{directory.name}.py" in copies and "zoo_core_block.py" in copies, directory.name
        others = {f"zoo_models_{m}.py" for m in ("gpt", "bert", "vit", "transformer", "cnn") if m != directory.name}
        assert not others & copies, directory.name  # only the model's own module goes along
        for name in copies:
            package = name.removesuffix(".py").removeprefix("zoo_").partition("_")[0]
            assert written[name] == made_relative(zoo_source(name), package), name
        for name in set(written) - copies:  # the hand-written transformers classes (and the hub's stand-in)
            assert written[name] == templates[name], name


def imported_modules(source: str) -> set[str]:
    """The top-level names of the absolute imports of a Python source."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_the_exported_code_imports_no_zoo(tmp_path):
    bert_model = bert(WordPieceTokenizer.train(BERT_TEXTS, 120), positions="rope")
    for model in (vit(qk_norm=True), bert_model, transformer(translation_tokenizer())):
        export_hf(model, tmp_path / model.model_type)
    two_sided = translation_tokenizer(joint=False)  # its tokenizer is code too
    export_hf(transformer(two_sided), tmp_path / "two_sided", tokenizer_json=two_sided.to_json())
    export_hf(gpt(**GPT_SWITCHES["recipe"]), tmp_path, tokenizer_json=char_tokenizer().to_json())
    written = {file.name for file in tmp_path.rglob("*.py")}
    assert {"zoo_gpt.py", "zoo_bert.py", "zoo_vit.py", "zoo_transformer.py", "zoo_translation_tokenizer.py"} <= written
    allowed = set(sys.stdlib_module_names) | {"torch", "transformers", "tokenizers"}
    for file in tmp_path.rglob("*.py"):
        assert imported_modules(file.read_text()) <= allowed, file.name
    # And it runs where zoo cannot be imported at all (sys.modules["zoo"] = None makes every zoo import fail).
    code = (
        "import sys; sys.modules['zoo'] = None\n"
        "import torch, transformers\n"
        f"m = transformers.AutoModelForCausalLM.from_pretrained({str(tmp_path)!r}, trust_remote_code=True)\n"
        "print(tuple(m(torch.tensor([[1, 2, 3]])).logits.shape))\n"
        f"t = transformers.AutoTokenizer.from_pretrained({str(tmp_path / 'two_sided')!r}, trust_remote_code=True)\n"
        "print(t('zwei junge hunde.')['input_ids'])\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    shape, ids = result.stdout.strip().splitlines()[-2:]
    assert shape == f"(1, 3, {char_tokenizer().vocab_size})"
    assert ids == str(two_sided.encode_source("zwei junge hunde."))
