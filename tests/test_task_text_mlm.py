"""Self-pretraining on the task's text (model.mlm_steps): the masked-LM phase of a classifier's first steps."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from zoo.data.batches import EncoderBatch
from zoo.data.bert_pretraining import mask_tokens
from zoo.data.wordpiece import WordPieceTokenizer
from zoo.models import BERT
from zoo.tasks import SequenceClassificationTask
from zoo.tasks.task_text_mlm import TaskTextMLM

# training_step logs; outside a Trainer Lightning warns that it has nowhere to log to.
pytestmark = pytest.mark.filterwarnings(r"ignore:You are trying to `self.log\(\)`")

SENTENCES = [
    "a gorgeous , witty , seductive movie .",
    "the acting is flat and the plot goes nowhere .",
    "an utterly charming and hilarious film",
    "it 's a dull , lifeless affair .",
    "one of the best films of the year",
    "the script is a mess",
] * 4


@pytest.fixture(scope="module")
def tokenizer() -> WordPieceTokenizer:
    return WordPieceTokenizer.train(SENTENCES, 200)


def classifier(tokenizer) -> BERT:
    torch.manual_seed(0)
    return BERT.from_preset(
        "bert-tiny", head="classification", vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.pad_id
    )


def batch_of(tokenizer, rows: list[str]) -> EncoderBatch:
    """Rows as [CLS] ... [SEP], right-padded to the longest."""
    ids = [tokenizer.build_pair(tokenizer.encode(r))[0] for r in rows]
    length = max(map(len, ids))
    input_ids = torch.full((len(ids), length), tokenizer.pad_id)
    for i, row in enumerate(ids):
        input_ids[i, : len(row)] = torch.tensor(row)
    mask = (input_ids != tokenizer.pad_id).long()
    return EncoderBatch(
        input_ids=input_ids,
        token_type_ids=torch.zeros_like(input_ids),
        attention_mask=mask,
        labels=torch.tensor([1, 0] * (len(ids) // 2)),
    )


def test_loss_is_the_pretraining_models_mlm_loss_on_the_same_masks(tokenizer):
    """The same weights in a BERT with its own pretraining head, masked with the same draws, give the same loss:
    the head is BERT's MLM head, tied to the token embeddings, and only real, non-special tokens are predicted."""
    net = classifier(tokenizer)
    mlm = TaskTextMLM(net, steps=5)
    torch.nn.init.normal_(mlm.head.bias, std=0.1)  # nonzero, so that a bias left out would show
    mlm.use_tokenizer(tokenizer, net.config.vocab_size)
    batch = batch_of(tokenizer, SENTENCES[:6])
    net.eval()
    torch.manual_seed(3)
    loss, _ = mlm.loss(net, batch)

    reference = BERT(dataclasses.replace(net.config, head="pretraining")).eval()
    reference.load_encoder_from(net)
    reference.mlm.load_state_dict(mlm.head.state_dict())
    special = torch.tensor(sorted(tokenizer.special_ids))
    ids = torch.arange(tokenizer.vocab_size)
    maskable = ~torch.isin(batch.input_ids, special) & batch.attention_mask.bool()
    torch.manual_seed(3)
    inputs, labels = mask_tokens(
        batch.input_ids, maskable, mask_id=tokenizer.mask_id, replacement_ids=ids[~torch.isin(ids, special)]
    )
    assert (labels[~maskable] == -100).all() and (labels[maskable] != -100).any()
    out = reference(inputs, attention_mask=batch.attention_mask)
    expected = F.cross_entropy(out.mlm_logits.reshape(-1, tokenizer.vocab_size), labels.reshape(-1))
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)


def test_the_phase_trains_the_encoder_and_head_and_leaves_the_classifier_alone(tokenizer):
    net = classifier(tokenizer)
    task = SequenceClassificationTask(net, tokenizer=tokenizer, mlm_steps=2)
    task.on_fit_start()
    loss = task.training_step(batch_of(tokenizer, SENTENCES[:4]), 0)  # global_step 0 < 2: the MLM phase
    loss.backward()
    assert net.classifier.weight.grad is None and net.pooler.weight.grad is None
    assert net.tok_emb.weight.grad.abs().sum() > 0 and task.task_mlm.head.dense.weight.grad.abs().sum() > 0
    in_groups = {id(p) for group in task.param_groups() for p in group["params"]}
    assert all(id(p) in in_groups for p in task.task_mlm.parameters())  # the head's weights are optimized


def test_after_the_phase_the_classifier_loss_is_trained(tokenizer, monkeypatch):
    net = classifier(tokenizer)
    task = SequenceClassificationTask(net, tokenizer=tokenizer, mlm_steps=2)
    task.on_fit_start()
    monkeypatch.setattr(SequenceClassificationTask, "global_step", property(lambda self: 2))
    task.eval()  # no dropout: the loss is compared with a second forward
    batch = batch_of(tokenizer, SENTENCES[:4])
    loss = task.training_step(batch, 0)
    torch.testing.assert_close(loss, F.cross_entropy(task(batch), batch.labels))
    loss.backward()
    assert task.task_mlm.head.dense.weight.grad is None and net.classifier.weight.grad is not None


def test_no_phase_no_head_and_the_state_dict_keys_of_before(tokenizer):
    net = classifier(tokenizer)
    task = SequenceClassificationTask(net, tokenizer=tokenizer)
    assert task.task_mlm is None and all(k.startswith(("net.", "train_", "val_")) for k in task.state_dict())


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [({"mlm_steps": -1}, "model.mlm_steps must be >= 0"), ({"mlm_probability": 1.5}, "model.mlm_probability")],
)
def test_bad_options_are_named(tokenizer, kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        SequenceClassificationTask(classifier(tokenizer), **{"mlm_steps": 3, **kwargs})


def test_the_phase_without_a_tokenizer_says_what_to_pass(tokenizer):
    task = SequenceClassificationTask(classifier(tokenizer), mlm_steps=3)
    with pytest.raises(ValueError, match="needs the data's tokenizer"):
        task.on_fit_start()
