"""Certify methods: which there are (:mod:`rsjax.methods.registry`), and what a method is
(handed on from :mod:`rsjax.runs.method`).

* :class:`Method`, :class:`Option`, :class:`Context` and the :class:`Certifier`
  protocol: a method is a JAX-free description (name, options, what it may claim, its
  check for ``rsjax verify``) and a certifier named by a string path, the value
  ``rsjax.certify`` takes, built from the options by ``Method.build``.
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
  from rsjax.runs.method import Certifier as Certifier
  from rsjax.runs.method import Context as Context
  from rsjax.runs.method import Method as Method
  from rsjax.runs.method import Option as Option

_METHOD = ("Certifier", "Context", "Method", "Option")
_REGISTRY = ("ENTRY_POINT_GROUP", "METHODS", "available", "get")

__getattr__, __dir__, __all__ = _lazy.exports(
  __name__,
  {
    **{name: "rsjax.runs.method" for name in _METHOD},
    **{name: "rsjax.methods.registry" for name in _REGISTRY},
  },
  submodules=("registry",),
)
