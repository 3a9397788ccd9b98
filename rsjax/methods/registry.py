"""The registry of certify methods: a tuple of method values (``rsjax.runs.method.Method``).

Each method lives in its own package and exports its value from a module
without JAX (``rsjax.cohen.METHOD``, ...): its name, options (the
command's flags), what a run of it may claim (``noises``, ``multiclass``, ``budget``),
its certifier and how ``rsjax verify`` checks it. The command line, ``rsjax verify``,
``rsjax audit`` and research code all read this one table::

  import rsjax
  method = rsjax.methods.get("ucan")
  certifier = method.build(context, ucan_pattern="l1")  # the other options at their defaults
  rsjax.runs.runner.certify_dataset(context, certifier, ds.get_batch, indices, "out.tsv")

Adding a method is its package and one line in :data:`METHODS`, nothing else: the package
holds its ``Method`` value (``<package>.method``, no JAX) with its claims, and the
certifier that value names (an ``rsjax.runs.method.Certifier``: ``from_options``,
``certify(batch)``, and where they differ from the defaults ``columns``, ``sequential``,
``sigma_of``, ``classifier``, ``describe``, ``details``, ``restore``), the same value
``rsjax.certify(certifier=...)`` takes; ``rsjax.claims`` names no method. A method of
another package registers itself without touching rsjax: an entry point of
the group ``rsjax.methods`` (``[project.entry-points."rsjax.methods"]`` in its
``pyproject.toml``) that names its ``Method`` value; :func:`available` and
:func:`get` see it, and so do ``rsjax certify --method`` and ``rsjax verify``.
Every method states what its radius guarantees (``Certificate.guarantee``)
and writes a ``sound`` column (1: a certificate; 0: numbers reported for
comparison only) when it can produce results that are not certificates.
"""

from __future__ import annotations

import functools
from importlib import metadata

from rsjax import ablation, cohen, ddrs, dual, idrs, srs, ucan
from rsjax.runs.method import Method

__all__ = ["ENTRY_POINT_GROUP", "METHODS", "available", "get"]

#: The methods of rsjax, in the order of ``--help``.
METHODS: tuple[Method, ...] = (
  cohen.METHOD,
  cohen.RECERTIFY,
  idrs.METHOD,
  ucan.METHOD,
  ddrs.METHOD,
  srs.STANDARD_METHOD,
  srs.SRS_METHOD,
  dual.METHOD,
  ablation.PATCH_METHOD,
  ablation.L0_METHOD,
)

#: The entry-point group through which another package registers its ``Method`` values.
ENTRY_POINT_GROUP = "rsjax.methods"


@functools.cache
def available() -> tuple[Method, ...]:
  """:data:`METHODS` and then the methods other packages register (entry points).

  Raises:
    ValueError: an entry point that is not a ``Method``, or a name taken twice.
  """
  found = list(METHODS)
  for entry in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
    value = entry.load()
    if not isinstance(value, Method):
      raise ValueError(
        f"entry point {entry.name!r} of {ENTRY_POINT_GROUP!r} ({entry.value}) is "
        f"not an rsjax.methods.Method"
      )
    found.append(value)
  names = [m.name for m in found]
  twice = sorted({n for n in names if names.count(n) > 1})
  if twice:
    raise ValueError(f"method names registered twice: {twice}")
  return tuple(found)


def get(name: str) -> Method:
  """The method called ``name``.

  Raises:
    KeyError: no such method (the message lists the available ones).
  """
  for m in available():
    if m.name == name:
      return m
  raise KeyError(f"no method {name!r}; available: {', '.join(m.name for m in available())}")
