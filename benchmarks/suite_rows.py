"""rsjax's side of a row of the GPU suite (``benchmarks.suite``): the model built at the
suite's precision, optionally folded or packed, and the engine's batch."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

import rsjax
from benchmarks import measure
from rsjax import models
from rsjax.engine import batching

__all__ = ["ALPHA", "N0", "PRECISIONS", "SIGMA", "RowModel", "row_model"]

N0 = 100
ALPHA = 0.001
SIGMA = 0.25
# The suite's precision names -> rsjax's declared precision (``rsjax.engine.precision``); the twin
# computes the same way (TF32 off for fp32, on for tf32, bf16 autocast).
PRECISIONS = {"fp32": "float32", "tf32": "tf32", "bf16": "bfloat16"}


@dataclasses.dataclass(frozen=True)
class RowModel:
  """rsjax's side of a suite row: the model, its forward, the engine's batch and precision."""

  spec: measure.Spec
  model: Any
  apply_fn: Any
  variables: Any
  batch_size: int
  precision: str  # rsjax's declared precision (``rsjax.engine.precision``)
  seed: int
  pack: int = 1  # samples per packed row of the narrow stage (1: not packed)

  def certify(self, x: np.ndarray, ids, *, n0: int, num: int, **options: Any):
    """``rsjax.certify`` of ``x`` ``[b, *input_shape]`` at the suite's sigma and alpha."""
    return rsjax.certify(
      jax.random.key(self.seed),
      self.apply_fn,
      self.variables,
      x,
      ids=ids,
      sigma=SIGMA,
      num_classes=self.spec.num_classes,
      n0=n0,
      n=num,
      alpha=ALPHA,
      batch_size=self.batch_size,
      precision=self.precision,
      **options,
    )


def row_model(
  name: str,
  precision: str,
  *,
  num: int,
  batch_size,
  seed: int = 0,
  fold_bn: bool = False,
  pack: int = 1,
  input_size: int | None = None,
  log=print,
) -> RowModel:
  """Builds ``name`` (seeded) at the suite's ``precision`` and picks the engine's batch.

  ``fold_bn``: rsjax certifies the model with eval-mode batch norm folded into the
  convolutions (the same function up to rounding, one memory pass fewer per conv);
  ``pack``: with its narrow stage packed ``pack`` samples a row
  (``rsjax.models.pack_narrow_stage``; a model without one runs unpacked, ``RowModel.pack``
  1, and says so). ``RowModel.model`` stays as built (the twin runs it as it is).
  ``input_size``: square inputs of that many pixels instead of the model's usual size (a
  small ResNet-50 for a CPU check).
  """
  spec = measure.SPECS[name]
  if input_size:
    spec = dataclasses.replace(spec, input_shape=(input_size, input_size) + spec.input_shape[2:])
  declared = PRECISIONS[precision]
  model = models.create_model(
    name, num_classes=spec.num_classes, input_shape=spec.input_shape, rngs=seed
  )
  certified = models.fold_batch_norm(model)[0] if fold_bn else model
  try:
    certified = models.pack_narrow_stage(certified, pack)
  except ValueError as e:
    log(f"  --pack {pack}: {e}; {name} runs unpacked")
    pack = 1
  apply_fn, variables = models.to_apply_fn(certified)
  if batch_size == "auto":
    bs = batching.auto_batch_size(
      apply_fn,
      variables,
      spec.input_shape,
      num=num,
      compute_dtype=rsjax.engine.precision.compute_dtype(declared),
    )
  else:
    bs = int(batch_size)
  return RowModel(spec, model, apply_fn, variables, bs, declared, seed, pack)
