"""``--method idrs`` as a value (no JAX here: ``rsjax verify`` reads it)."""

from __future__ import annotations

from rsjax.claims import GAUSSIAN
from rsjax.idrs._check import check_idrs
from rsjax.runs.method import Method, Option

__all__ = ["METHOD"]


#: ``--method idrs``: input-dependent sigma(x) with the sound IDRS radius.
METHOD = Method(
  "idrs",
  "input-dependent sigma(x) with the sound IDRS certificate",
  "rsjax.idrs._certify:IDRS",
  (
    Option("idrs_rate", 0.01, "IDRS semi-elasticity r", float),
    Option("idrs_k", 20, "IDRS nearest neighbours k", int, positive=True),
    Option(
      "idrs_m", None, "IDRS offset m (default by dataset: 1.5 for MNIST, 5 for CIFAR-10)", float
    ),
  ),
  check=check_idrs,
  noises=GAUSSIAN,
  columns=("sigma",),
)
