"""Certify methods: which there are (:mod:`rsjax.methods.registry`), and what a method is
(handed on from :mod:`rsjax.runs.method`).

* :class:`Method`, :class:`Option`, :class:`Context`, :class:`Plan` and the
  :class:`MethodCertifier` protocol: a method is a JAX-free description (name,
  options, its check for ``rsjax verify``) and a certifier named by a string
  path, built from the options by one generic plan.
* :data:`METHODS`, :func:`available`, :func:`get`: the registry, with the
  methods other packages register through the entry-point group
  :data:`ENTRY_POINT_GROUP`.

Names are imported on first use. A method package imports ``rsjax.runs.method``, below
the registry (which imports every method package); another package's method may import
the names from here.
"""

from typing import TYPE_CHECKING

from rsjax import _lazy

if TYPE_CHECKING:
  from rsjax.methods.registry import ENTRY_POINT_GROUP as ENTRY_POINT_GROUP
  from rsjax.methods.registry import METHODS as METHODS
  from rsjax.methods.registry import available as available
  from rsjax.methods.registry import get as get
  from rsjax.runs.method import Context as Context
  from rsjax.runs.method import Method as Method
  from rsjax.runs.method import MethodCertifier as MethodCertifier
  from rsjax.runs.method import Option as Option
  from rsjax.runs.method import Plan as Plan

_METHOD = ("Context", "Method", "MethodCertifier", "Option", "Plan")
_REGISTRY = ("ENTRY_POINT_GROUP", "METHODS", "available", "get")

__getattr__, __dir__, __all__ = _lazy.exports(
  __name__,
  {
    **{name: "rsjax.runs.method" for name in _METHOD},
    **{name: "rsjax.methods.registry" for name in _REGISTRY},
  },
  submodules=("registry",),
)
