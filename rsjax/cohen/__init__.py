"""Cohen et al.'s randomized smoothing (ICML 2019): CERTIFY and PREDICT, and ``--method cohen``.

* ``certify`` / ``predict`` (``rsjax.certify``, ``rsjax.predict``): many
  inputs at once on the engine's counts (``rsjax.engine``), fixed ``n0`` and
  ``n`` or budgeted on a radius grid (``budget=``). A certifier (``rsjax.methods.Certifier``:
  ``Cohen`` and each method's) certifies one ``Batch``, the same value whether
  ``rsjax.certify`` or a run (``rsjax.runs.runner.certify_dataset``) calls it.
* ``METHOD``: the method value of the registry (``rsjax.methods``); its check
  derives each row's radius again from the counts for ``rsjax verify``.

Names are imported on first use (``rsjax.cohen.method`` imports no JAX).
"""

from rsjax import _lazy

__getattr__, __dir__, __all__ = _lazy.exports(
  __name__,
  {
    "Batch": "rsjax.cohen._certify",
    "Cohen": "rsjax.cohen._certify",
    "certify": "rsjax.cohen._certify",
    "certify_with": "rsjax.cohen._certify",
    "predict": "rsjax.cohen._certify",
    "Parent": "rsjax.cohen._recertify",
    "Recertified": "rsjax.cohen._recertify",
    "Recertify": "rsjax.cohen._recertify",
    "recertify": "rsjax.cohen._recertify",
    "METHOD": "rsjax.cohen.method",
    "RECERTIFY": "rsjax.cohen.method",
    "parse_grid": "rsjax.cohen.method",
  },
)
