"""Masked-LM pretraining on a fine-tuning task's own training text, for the first `steps` optimizer steps of the
same run (self-pretraining: Krishna et al. 2022, "Downstream Datasets Make Surprisingly Good Pretraining Corpora").

The MLM head (tied to the token embeddings) lives here, not in the classifier network, so that the fine-tuned
network, its checkpoint's model config and its Hugging Face export are those of a plain classifier; its weights are
in the task's checkpoint so that a resumed run continues exactly."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from zoo.data.bert_pretraining import mask_tokens
from zoo.models.bert import BERT, MLMHead


def check_mlm_options(steps, mlm_probability) -> None:
    """The phase's options, checked whether it runs or not: mlm_steps=1.5 would otherwise count steps with a float,
    and a wrong probability would wait, accepted, until someone turns the phase on."""
    if isinstance(steps, bool) or not isinstance(steps, int):
        raise ValueError(f"model.mlm_steps must be an integer (optimizer steps; 0: no masked-LM phase), got {steps!r}")
    if steps < 0:
        raise ValueError(f"model.mlm_steps must be >= 0 (0: no masked-LM phase), got {steps}")
    number = isinstance(mlm_probability, (int, float)) and not isinstance(mlm_probability, bool)
    if not number or not 0.0 < mlm_probability < 1.0:
        raise ValueError(f"model.mlm_probability must be in (0, 1), got {mlm_probability!r}")


class TaskTextMLM(nn.Module):
    """The masked-LM head and loss of an encoder's self-pretraining phase."""

    def __init__(self, net: BERT, *, steps: int, mlm_probability: float = 0.15) -> None:
        super().__init__()
        c = net.config
        self.steps, self.mlm_probability = steps, mlm_probability
        self.head = MLMHead(c.hidden_size, c.vocab_size, c.hidden_act, c.layer_norm_eps)
        # The initialization BERT gives its own MLM head (std initializer_range, zero biases, unit LayerNorm).
        nn.init.normal_(self.head.dense.weight, std=c.initializer_range)
        nn.init.zeros_(self.head.dense.bias)

    def active(self, global_step: int) -> bool:
        return global_step < self.steps

    def use_tokenizer(self, tokenizer, vocab_size: int) -> None:
        """Which ids are special (never masked, never a random replacement) and which is [MASK]."""
        if tokenizer is None:
            raise ValueError(
                "model.mlm_steps > 0 needs the data's tokenizer (its [MASK] id); build the task through train.py, "
                "or pass tokenizer=datamodule.tokenizer"
            )
        self._mask_id = tokenizer.mask_id
        self._special = torch.tensor(sorted(tokenizer.special_ids))
        ids = torch.arange(vocab_size)
        self._replacement = ids[~torch.isin(ids, self._special)]

    def loss(self, net: BERT, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Mask the batch's real, non-special tokens; the mean cross-entropy of predicting them, and their number
        (a tensor: no sync with the device)."""
        ids = batch.input_ids
        maskable = ~torch.isin(ids, self._special.to(ids.device)) & batch.attention_mask.to(torch.bool)
        # Drawn on the batch's device from its global generator: seeded by the run's seed, restored on resume
        # (zoo.callbacks.rng_state), and no copy to the host and back in every step.
        inputs, labels = mask_tokens(
            ids,
            maskable,
            mask_id=self._mask_id,
            replacement_ids=self._replacement,
            mlm_probability=self.mlm_probability,
        )
        hidden, _ = net.encode(inputs, token_type_ids=batch.token_type_ids, attention_mask=batch.attention_mask)
        chosen = labels != -100
        logits = self.head(hidden[chosen], net.tok_emb)
        return F.cross_entropy(logits.float(), labels[chosen]), chosen.sum()
