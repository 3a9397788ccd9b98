"""Variables a model sets during a training call for the trainer to read.

* ``AuxLoss``: a scalar the trainer adds to the objective's loss (averaged over
  the model's calls in one step), e.g. the Jacobian regularizer of a DEQ.
* ``Diagnostic``: a scalar the trainer averages over each epoch and logs in the
  history under the variable's name, e.g. a DEQ solver's residual and steps.

Declare them in ``__init__`` (``nnx.Variable`` subclasses with a scalar value, so
the state keeps one structure) and ``set_value`` them in the train-mode call.
"""

from __future__ import annotations

from flax import nnx

__all__ = ["AuxLoss", "Diagnostic"]


class AuxLoss(nnx.Variable):
  """A scalar loss term set by the model in train mode, added by the trainer."""


class Diagnostic(nnx.Variable):
  """A scalar set by the model in train mode, averaged per epoch by the trainer."""
