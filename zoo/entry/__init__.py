"""What the top-level scripts (train.py, eval.py, generate.py) call. This floor may import all of zoo."""

from .resolvers import register as _register_resolvers

_register_resolvers()
