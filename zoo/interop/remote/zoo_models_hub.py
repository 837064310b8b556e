"""Stands in for zoo/models/hub.py in an export: zoo's own save/load format (`ZooModel.save_pretrained`), which
transformers does not use. Written by transformer-zoo's exporter; ZooModel (zoo_models_base.py) derives from it."""


class ZooHubMixin:
    pass
