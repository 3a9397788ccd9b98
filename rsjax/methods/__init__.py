"""Certify methods: what a method is (:mod:`rsjax.methods.base`) and which there are
(:mod:`rsjax.methods.registry`).

* :class:`Method`, :class:`Option`, :class:`Context`, :class:`Plan` and the
  :class:`MethodCertifier` protocol: a method is a JAX-free description (name,
  options, its check for ``rsjax verify``) and a certifier named by a string
  path, built from the options by one generic plan.
* :data:`METHODS`, :func:`available`, :func:`get`: the registry, with the
  methods other packages register through the entry-point group
  :data:`ENTRY_POINT_GROUP`.

Names are imported on first use: a method package imports ``rsjax.methods.base``
without the registry (which imports every method package).
"""

from typing import TYPE_CHECKING

from rsjax import _lazy

if TYPE_CHECKING:
  from rsjax.methods.base import Context as Context
  from rsjax.methods.base import Method as Method
  from rsjax.methods.base import MethodCertifier as MethodCertifier
  from rsjax.methods.base import Option as Option
  from rsjax.methods.base import Plan as Plan
  from rsjax.methods.registry import ENTRY_POINT_GROUP as ENTRY_POINT_GROUP
  from rsjax.methods.registry import METHODS as METHODS
  from rsjax.methods.registry import available as available
  from rsjax.methods.registry import get as get

_BASE = ("Context", "Method", "MethodCertifier", "Option", "Plan")
_REGISTRY = ("ENTRY_POINT_GROUP", "METHODS", "available", "get")

__getattr__, __dir__, __all__ = _lazy.exports(
  __name__,
  {
    **{name: "rsjax.methods.base" for name in _BASE},
    **{name: "rsjax.methods.registry" for name in _REGISTRY},
  },
  submodules=("base", "registry"),
)
