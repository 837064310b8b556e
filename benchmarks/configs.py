"""The benchmark configurations of issue 7: for each, zoo's model and the peers, same sizes, same loss.

Each builder takes its sizes (`sizes(name)`; a *_SIZE dict below by default) and returns (workloads,
flops_per_step, items_per_step, unit). FLOPs are the model's (6 per parameter per token for forward + backward, plus
attention), identical for every implementation of a configuration. `sizes(name, tiny=True)` swaps every
configuration for a tiny one (TINY_SIZES): a check that every row runs, not a measurement.

Every peer runs in each of the attention paths its users can choose (issue 30): one workload per setting, its
`family` naming the peer (`hf`, `timm`, `torchvision`, `marian`, `torch-nn`); the report counts the fastest setting
of each family as that peer (benchmarks.run.fastest_by_family). Which path is fastest depends on the machine and
the dtype (on a CPU with native bf16, eager bf16 attention beat SDPA's bf16 kernel at these shapes), so a peer held
to one path would measure its default path, not the peer.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from zoo.models import GPT, GPTConfig

from .harness import Workload


def _next_token_targets(ids: torch.Tensor) -> torch.Tensor:
    # Position t predicts token t + 1; the last position has none (ignored), as in HF's causal-LM loss.
    return F.pad(ids[:, 1:], (0, 1), value=-100)


def _attention_flops(n_layers: int, d_model: int, seq: int) -> int:
    # QK^T and AV: 2 * 2 * seq * d per token and layer forward, x3 with the backward.
    return 12 * n_layers * d_model * seq


# ---- GPT ---------------------------------------------------------------------------------------------
GPT_SIZE = dict(vocab=8192, layers=4, heads=4, d=256, seq=256, batch=8)
# The GPU configuration of issue 7 (opt-in: `--configs gpt2`; a CPU step takes tens of seconds).
GPT2_SIZE = dict(vocab=50257, layers=12, heads=12, d=768, seq=1024, batch=8)


def _hf_gpt2(impl: str, s: dict):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=s["vocab"],
        n_positions=s["seq"],
        n_embd=s["d"],
        n_layer=s["layers"],
        n_head=s["heads"],
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        attn_implementation=impl,
    )
    return GPT2LMHeadModel(config)


def _zoo_gpt(s: dict, **overrides) -> GPT:
    return GPT(
        GPTConfig(
            vocab_size=s["vocab"],
            block_size=s["seq"],
            n_layer=s["layers"],
            n_head=s["heads"],
            n_embd=s["d"],
            dropout=0.0,
            activation="gelu_tanh",
            **overrides,
        )
    )


# HF's `attn_implementation` settings that run on a CPU and on any GPU (flash-attention needs its own package).
HF_ATTENTION = ("sdpa", "eager")


def gpt(s: dict = GPT_SIZE, peers=HF_ATTENTION):

    def batch():
        ids = torch.randint(0, s["vocab"], (s["batch"], s["seq"]))
        return ids, _next_token_targets(ids)

    # Each implementation's own training loss: zoo's fused output layer + cross-entropy, HF's `labels=`.
    def zoo_loss(model, b):
        return model.loss(b[0], b[1])

    def hf_loss(model, b):
        return model(input_ids=b[0], labels=b[0]).loss

    def hf(impl):
        return Workload(
            f"hf-{impl}", lambda: _hf_gpt2(impl, s), batch, hf_loss, lambda m, b: m(input_ids=b[0]).logits, family="hf"
        )

    workloads = [Workload("zoo", lambda: _zoo_gpt(s), batch, zoo_loss, lambda m, b: m(b[0])), *map(hf, peers)]
    tokens = s["batch"] * s["seq"]
    flops = _zoo_gpt(s).flops_per_token(s["seq"]) * tokens
    return workloads, flops, tokens, "tokens"


def gpt2(s: dict = GPT2_SIZE):
    """GPT-2 124M at its full context against HF's SDPA model: the configuration to run on a GPU in bf16."""
    return gpt(s, peers=("sdpa",))


# ---- generation ----------------------------------------------------------------------------------------
GENERATION = dict(prompt=16, new_tokens=240)


def generation_models(s: dict = GENERATION, gpt_sizes: dict = GPT_SIZE):
    """(name, model, generate(model, prompt) -> ids) for zoo and HF's generate with its KV cache, greedy: `s` the
    lengths (GENERATION), `gpt_sizes` the model's (GPT_SIZE)."""
    n = s["new_tokens"]
    zoo = _zoo_gpt(gpt_sizes).eval()
    hf = _hf_gpt2("sdpa", gpt_sizes).eval()
    hf.load_state_dict(_zoo_weights_as_hf(zoo))

    def zoo_generate(model, prompt):
        return model.generate(prompt, n, temperature=0.0)

    def hf_generate(model, prompt):
        return model.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=n,
            min_new_tokens=n,
            do_sample=False,
            pad_token_id=0,
        )

    return [("zoo", zoo, zoo_generate), ("hf", hf, hf_generate)]


def _zoo_weights_as_hf(model: GPT) -> dict:
    # Same weights in both, so both decode the same tokens and the comparison is of speed alone.
    from zoo.interop import gpt2

    _, weights = gpt2.save(model)
    weights["lm_head.weight"] = weights["transformer.wte.weight"]
    return weights


# ---- BERT pretraining (MLM + NSP) ----------------------------------------------------------------------
BERT_SIZE = dict(vocab=30522, layers=4, hidden=256, heads=4, ff=1024, seq=128, batch=16, mlm=0.15)


def bert(s: dict = BERT_SIZE):
    from transformers import BertConfig, BertForPreTraining

    from zoo.models import BERT, BERTConfig

    def batch():
        generator = torch.Generator().manual_seed(0)
        ids = torch.randint(5, s["vocab"], (s["batch"], s["seq"]), generator=generator)
        segments = (torch.arange(s["seq"]) >= s["seq"] // 2).long().expand(s["batch"], -1)
        labelled = torch.rand(s["batch"], s["seq"], generator=generator) < s["mlm"]
        labels = torch.where(labelled, torch.randint(5, s["vocab"], ids.shape, generator=generator), -100)
        nsp = torch.randint(0, 2, (s["batch"],), generator=generator)
        return ids, segments, torch.ones_like(ids), labels, nsp

    def zoo_forward(model, b):
        ids, segments, mask, labels, _ = b
        return model(ids, token_type_ids=segments, attention_mask=mask, mlm_positions=labels != -100)

    def zoo_loss(model, b):
        out = zoo_forward(model, b)  # MLM logits only at the labelled positions
        labels = b[3]
        return F.cross_entropy(out.mlm_logits, labels[labels != -100]) + F.cross_entropy(out.nsp_logits, b[4])

    def hf_forward(model, b):
        return model(input_ids=b[0], token_type_ids=b[1], attention_mask=b[2])

    def hf_loss(model, b):  # BertForPreTraining's own MLM + NSP loss
        return model(
            input_ids=b[0], token_type_ids=b[1], attention_mask=b[2], labels=b[3], next_sentence_label=b[4]
        ).loss

    def hf(impl):
        return BertForPreTraining(
            BertConfig(
                vocab_size=s["vocab"],
                hidden_size=s["hidden"],
                num_hidden_layers=s["layers"],
                num_attention_heads=s["heads"],
                intermediate_size=s["ff"],
                hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0,
                attn_implementation=impl,
            )
        )

    def zoo():
        return BERT(
            BERTConfig(
                vocab_size=s["vocab"],
                hidden_size=s["hidden"],
                num_hidden_layers=s["layers"],
                num_attention_heads=s["heads"],
                intermediate_size=s["ff"],
                hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0,
            )
        )

    workloads = [
        Workload("zoo", zoo, batch, zoo_loss, zoo_forward),
        *(
            Workload(f"hf-{impl}", functools.partial(hf, impl), batch, hf_loss, hf_forward, family="hf")
            for impl in HF_ATTENTION
        ),
    ]
    tokens = s["batch"] * s["seq"]
    # Model FLOPs of the encoder (the MLM projection counted at the labelled positions only, as zoo computes it).
    flops = zoo().flops_per_token(s["seq"]) * tokens + 6 * s["vocab"] * s["hidden"] * int(tokens * s["mlm"])
    return workloads, flops, tokens, "tokens"


# ---- ViT ---------------------------------------------------------------------------------------------
VIT_SIZE = dict(image=32, patch=4, dim=192, depth=6, heads=3, mlp=768, classes=10, batch=64)


def vit(s: dict = VIT_SIZE):
    import timm.models.vision_transformer as timm_vit
    import torchvision
    from transformers import ViTConfig as HFViTConfig
    from transformers import ViTForImageClassification

    from zoo.models import ViT, ViTConfig

    def batch():
        generator = torch.Generator().manual_seed(0)
        images = torch.randn(s["batch"], 3, s["image"], s["image"], generator=generator)
        return images, torch.randint(0, s["classes"], (s["batch"],), generator=generator)

    def zoo():
        return ViT(
            ViTConfig(
                image_size=s["image"],
                patch_size=s["patch"],
                num_classes=s["classes"],
                embed_dim=s["dim"],
                depth=s["depth"],
                num_heads=s["heads"],
                mlp_dim=s["mlp"],
            )
        )

    def timm_model(fused: bool):
        model = timm_vit.VisionTransformer(
            img_size=s["image"],
            patch_size=s["patch"],
            num_classes=s["classes"],
            embed_dim=s["dim"],
            depth=s["depth"],
            num_heads=s["heads"],
            mlp_ratio=s["mlp"] / s["dim"],
        )
        # timm's switch, per built model: each attention module reads its own `fused_attn` at every forward (SDPA
        # when true, matmul-softmax-matmul when false); timm.layers.set_fused_attn only sets what modules built
        # after it copy, process-wide, so the rows would leak into each other.
        for module in model.modules():
            if hasattr(module, "fused_attn"):
                module.fused_attn = fused
        return model

    def torchvision_model():
        # One attention path: nn.MultiheadAttention with need_weights=False (SDPA in training); torchvision offers
        # no switch, and nn.MultiheadAttention's fast path applies only to inference.
        return torchvision.models.VisionTransformer(
            image_size=s["image"],
            patch_size=s["patch"],
            num_layers=s["depth"],
            num_heads=s["heads"],
            hidden_dim=s["dim"],
            mlp_dim=s["mlp"],
            num_classes=s["classes"],
        )

    def hf_model(impl: str):
        return ViTForImageClassification(
            HFViTConfig(
                image_size=s["image"],
                patch_size=s["patch"],
                num_channels=3,
                hidden_size=s["dim"],
                num_hidden_layers=s["depth"],
                num_attention_heads=s["heads"],
                intermediate_size=s["mlp"],
                num_labels=s["classes"],
                attn_implementation=impl,
            )
        )

    def loss_of(logits_fn):
        return lambda model, b: F.cross_entropy(logits_fn(model, b), b[1])

    def plain(model, b):
        return model(b[0])

    def hf_logits(model, b):
        return model(pixel_values=b[0]).logits

    workloads = [
        Workload("zoo", zoo, batch, loss_of(plain), plain),
        Workload("timm-fused", lambda: timm_model(True), batch, loss_of(plain), plain, family="timm"),
        Workload("timm-unfused", lambda: timm_model(False), batch, loss_of(plain), plain, family="timm"),
        Workload("torchvision", torchvision_model, batch, loss_of(plain), plain, family="torchvision"),
        *(
            Workload(f"hf-{impl}", functools.partial(hf_model, impl), batch, loss_of(hf_logits), hf_logits, family="hf")
            for impl in HF_ATTENTION
        ),
    ]
    tokens = (s["image"] // s["patch"]) ** 2 + 1
    body = sum(p.numel() for n, p in zoo().named_parameters() if "pos" not in n)
    flops = (6 * body * tokens + _attention_flops(s["depth"], s["dim"], tokens) * tokens) * s["batch"]
    return workloads, flops, s["batch"], "images"


# ---- encoder-decoder Transformer ------------------------------------------------------------------------
MT_SIZE = dict(vocab=8000, d=256, heads=4, layers=3, ff=1024, src=32, tgt=32, batch=32)


class TorchTransformerMT(torch.nn.Module):
    """torch.nn.Transformer with the same embeddings and tied output as zoo's: the peer users build themselves."""

    def __init__(self, s: dict = MT_SIZE) -> None:
        super().__init__()
        self.s = s
        self.emb = torch.nn.Embedding(s["vocab"], s["d"])
        position = torch.arange(64, dtype=torch.float32)[:, None]
        rate = torch.exp(torch.arange(0, s["d"], 2, dtype=torch.float32) * (-torch.log(torch.tensor(1e4)) / s["d"]))
        table = torch.zeros(64, s["d"])
        table[:, 0::2], table[:, 1::2] = torch.sin(position * rate), torch.cos(position * rate)
        self.register_buffer("positions", table, persistent=False)
        self.body = torch.nn.Transformer(
            d_model=s["d"],
            nhead=s["heads"],
            num_encoder_layers=s["layers"],
            num_decoder_layers=s["layers"],
            dim_feedforward=s["ff"],
            dropout=0.0,
            batch_first=True,
        )

    def embed(self, ids):
        return self.emb(ids) * self.s["d"] ** 0.5 + self.positions[: ids.shape[1]]

    def forward(self, src, tgt):
        causal = torch.nn.Transformer.generate_square_subsequent_mask(tgt.shape[1], device=tgt.device)
        hidden = self.body(self.embed(src), self.embed(tgt), tgt_mask=causal, tgt_is_causal=True)
        return hidden @ self.emb.weight.t()


def transformer(s: dict = MT_SIZE):
    from transformers import MarianConfig, MarianMTModel

    from zoo.models import Transformer, TransformerConfig

    def batch():
        generator = torch.Generator().manual_seed(0)
        src = torch.randint(3, s["vocab"], (s["batch"], s["src"]), generator=generator)
        tgt = torch.randint(3, s["vocab"], (s["batch"], s["tgt"] + 1), generator=generator)
        return src, tgt[:, :-1].contiguous(), tgt[:, 1:].contiguous()

    def zoo():
        return Transformer(
            TransformerConfig(
                src_vocab_size=s["vocab"],
                d_model=s["d"],
                n_heads=s["heads"],
                d_ff=s["ff"],
                n_encoder_layers=s["layers"],
                n_decoder_layers=s["layers"],
                dropout=0.0,
                max_len=64,
            )
        )

    def marian(impl: str):
        return MarianMTModel(
            MarianConfig(
                vocab_size=s["vocab"],
                d_model=s["d"],
                encoder_layers=s["layers"],
                decoder_layers=s["layers"],
                encoder_attention_heads=s["heads"],
                decoder_attention_heads=s["heads"],
                encoder_ffn_dim=s["ff"],
                decoder_ffn_dim=s["ff"],
                activation_function="relu",
                dropout=0.0,
                attention_dropout=0.0,
                activation_dropout=0.0,
                max_position_embeddings=64,
                scale_embedding=True,
                pad_token_id=0,
                decoder_start_token_id=1,
                share_encoder_decoder_embeddings=True,
                attn_implementation=impl,
            )
        )

    def logits_zoo(model, b):
        return model(b[0], b[1])

    def logits_torch(model, b):
        return model(b[0], b[1])

    def logits_marian(model, b):
        return model(input_ids=b[0], decoder_input_ids=b[1]).logits

    # Each implementation's own training loss: zoo's fused output layer + cross-entropy, Marian's `labels=`,
    # and F.cross_entropy of the logits for the torch.nn.Transformer model a user writes.
    def zoo_loss(model, b):
        return model.loss(b[0], b[1], b[2])

    def torch_loss(model, b):
        return F.cross_entropy(logits_torch(model, b).reshape(-1, s["vocab"]), b[2].reshape(-1))

    def marian_loss(model, b):
        return model(input_ids=b[0], decoder_input_ids=b[1], labels=b[2]).loss

    workloads = [
        Workload("zoo", zoo, batch, zoo_loss, logits_zoo),
        # torch.nn.Transformer has one attention path when training: nn.MultiheadAttention with need_weights=False,
        # which calls SDPA. Its fast path (torch.backends.mha.set_fastpath_enabled, the encoder's nested tensors)
        # applies only to inference (eval mode, no gradients), so there is no training-time switch to give it a
        # second row; the forward-only column is its fast path where the encoder takes it.
        Workload(
            "torch-nn-transformer", lambda: TorchTransformerMT(s), batch, torch_loss, logits_torch, family="torch-nn"
        ),
        *(
            Workload(
                f"marian-{impl}", functools.partial(marian, impl), batch, marian_loss, logits_marian, family="marian"
            )
            for impl in HF_ATTENTION
        ),
    ]
    src_tokens, tgt_tokens = s["batch"] * s["src"], s["batch"] * s["tgt"]
    named = dict(zoo().named_parameters())
    encoder = sum(p.numel() for n, p in named.items() if n.startswith("encoder."))
    decoder = sum(p.numel() for n, p in named.items() if n.startswith("decoder."))
    # 6 FLOPs per weight per token on its own side, the tied output projection on target tokens, and the
    # attention of encoder self-attention, decoder self-attention and cross-attention.
    flops = (
        6 * encoder * src_tokens
        + 6 * decoder * tgt_tokens
        + 6 * s["vocab"] * s["d"] * tgt_tokens
        + _attention_flops(s["layers"], s["d"], s["src"]) * (src_tokens + 2 * tgt_tokens)
    )
    tokens = src_tokens + tgt_tokens
    return workloads, flops, tokens, "tokens"


CONFIGS = {"gpt": gpt, "bert": bert, "vit": vit, "transformer": transformer}
OPT_IN_CONFIGS = {"gpt2": gpt2}
SIZES = dict(gpt=GPT_SIZE, gpt2=GPT2_SIZE, generation=GENERATION, bert=BERT_SIZE, vit=VIT_SIZE, transformer=MT_SIZE)

# ---- tiny sizes --------------------------------------------------------------------------------------------
# Every configuration at a size that takes milliseconds a step on a CPU (`--tiny` of benchmarks.run and
# benchmarks.profile): the same builders, peers, losses and code paths, so a check that every row runs. Timings
# and MFU at these sizes are dominated by overheads and mean nothing. Generation's prompt + new tokens fit in the
# tiny GPT's context, as the default's fill GPT_SIZE's.
TINY_SIZES = dict(
    gpt=dict(vocab=128, layers=2, heads=2, d=32, seq=32, batch=2),
    gpt2=dict(vocab=128, layers=1, heads=2, d=32, seq=32, batch=2),
    generation=dict(prompt=8, new_tokens=16),
    bert=dict(vocab=128, layers=2, hidden=32, heads=2, ff=64, seq=32, batch=4, mlm=0.15),
    vit=dict(image=16, patch=4, dim=48, depth=2, heads=2, mlp=96, classes=10, batch=4),
    transformer=dict(vocab=128, d=32, heads=2, layers=1, ff=64, src=16, tgt=16, batch=2),
)


def sizes(name: str, tiny: bool = False) -> dict:
    """The sizes configuration `name` (a key of CONFIGS, OPT_IN_CONFIGS, or "generation") runs at."""
    return (TINY_SIZES if tiny else SIZES)[name]
