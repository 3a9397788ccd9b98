"""A run's value and its files: no JAX, no model (NumPy and the standard library).

* :mod:`rsjax.records.spec`: ``RunSpec``, the one value of a run (its claim, model,
  data, sampling and key derivation), written as ``<file>.run.json``; which rows
  (``declared_indices``).
* :mod:`rsjax.records.sampling`: ``RunSampling``, the sampling settings a run claims.
* :mod:`rsjax.records.canonical`, :mod:`rsjax.records.limits`: the claim's digest and
  the strict shape and bounds of a record.
* :mod:`rsjax.records.io`: result files (TSV), durable writes, resume.
* :mod:`rsjax.records.paths`: the files a record names, relative to the result file's folder.

The submodules are imported on first use.
"""

from rsjax import _lazy

__getattr__, __dir__, __all__ = _lazy.exports(
  __name__,
  {},
  submodules=("canonical", "io", "limits", "paths", "sampling", "spec"),
)
