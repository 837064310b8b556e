"""A transformer-zoo ViT for `transformers` (trust_remote_code=True), written by its exporter: zoo's ViT
(zoo_models_vit.py, every lab switch and pooling option included) as AutoModelForImageClassification (AutoModel
without a head)."""

from __future__ import annotations

import torch.nn.functional as F
from transformers.modeling_outputs import ImageClassifierOutput

from .zoo_hf import ZooConfig, ZooPreTrainedModel
from .zoo_models_vit import ViT


class ZooViTConfig(ZooConfig):
    model_type = "zoo_vit"
    zoo_class = ViT


class ZooViTForImageClassification(ZooPreTrainedModel):
    config_class = ZooViTConfig
    main_input_name = "pixel_values"

    def forward(self, pixel_values, labels=None, **unused):
        """pixel_values (B, C, H, W), normalized as in training (the export's image processor does it) -> logits
        (B, num_classes), or the pooled features (B, D) of a model without a head; with labels also the loss."""
        logits = self.zoo(pixel_values)
        loss = None if labels is None or not self.config.num_classes else F.cross_entropy(logits, labels)
        return ImageClassifierOutput(loss=loss, logits=logits)
