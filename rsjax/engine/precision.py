"""The declared precision of a certification run: how the base classifier is computed.

A certificate is about the network *as computed*. Two machines compute the same
network only when they compute it at the same precision, so the precision is a
setting of every run (``rsjax.Sampling.precision``, ``--precision``), part of a
run's identity, and a resume at another precision is refused.

* ``"float32"`` (the default): float32 inputs and parameters, float32 matmuls
  and convolutions at full precision (``jax.default_matmul_precision("highest")``).
  On a GPU, JAX's own default for float32 matmuls is TF32 (10-bit mantissa);
  this setting turns it off, so one GPU's counts equal the CPU's.
* ``"tf32"``: float32 storage, matmuls and convolutions in TensorFloat-32 where
  the hardware has it (Ampere and later GPUs; elsewhere the same as float32).
* ``"bfloat16"``: the noisy input and the floating parameters cast to bfloat16
  (the noise is drawn and added in float32, then cast). A different base
  classifier from the float32 one: compare certified accuracies
  (``benchmarks/configs/precision.py``) before relying on it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

__all__ = ["DEFAULT", "PRECISIONS", "compute_dtype", "context", "resolve", "traced_call"]

_T = TypeVar("_T")

DEFAULT = "float32"
#: name -> (compute dtype or None for float32, ``jax.default_matmul_precision`` value).
_TABLE = {
  "float32": (None, "highest"),
  "tf32": (None, "tensorfloat32"),
  "bfloat16": (jnp.bfloat16, "default"),
}
PRECISIONS = tuple(_TABLE)
_ALIASES = {
  "fp32": "float32",
  "f32": "float32",
  "highest": "float32",
  "bf16": "bfloat16",
  "tensorfloat32": "tf32",
}


def resolve(precision: str | None = None, compute_dtype: DTypeLike | None = None) -> str:
  """The precision's canonical name, from a name and/or the older ``compute_dtype``.

  Args:
    precision: a name in :data:`PRECISIONS` (or ``fp32``/``bf16``), or None.
    compute_dtype: None, float32 or bfloat16 (``compute_dtype=jnp.bfloat16`` is
      ``precision="bfloat16"``).

  Returns:
    One of :data:`PRECISIONS`.

  Raises:
    ValueError: an unknown name or dtype, or a dtype that contradicts the name.
  """
  name = None
  if precision is not None:
    name = _ALIASES.get(str(precision).lower(), str(precision).lower())
    if name not in _TABLE:
      raise ValueError(f"precision must be one of {list(PRECISIONS)}, got {precision!r}")
  from_dtype = None
  if compute_dtype is not None:
    dt = jnp.dtype(compute_dtype)
    if dt not in (jnp.bfloat16, jnp.float32):
      raise ValueError(
        f"compute_dtype must be float32 or bfloat16, got {dt}; use "
        f"precision= one of {list(PRECISIONS)}"
      )
    from_dtype = "bfloat16" if dt == jnp.bfloat16 else None
  if name is None:
    return from_dtype or DEFAULT
  if from_dtype is not None and from_dtype != name:
    raise ValueError(f"compute_dtype={jnp.dtype(compute_dtype)} contradicts precision={name!r}")
  return name


def compute_dtype(precision: str | None) -> DTypeLike | None:
  """The dtype the classifier runs in (None: float32 as given); ``precision`` as :func:`resolve`."""
  return _TABLE[resolve(precision)][0]


def context(precision: str | None) -> contextlib.AbstractContextManager[object]:
  """A context in which traced matmuls and convolutions use ``precision`` (as :func:`resolve`).

  JAX reads the default matmul precision when a function is traced, and keys
  its compilation cache on it, so a program traced inside this context keeps it.
  """
  return jax.default_matmul_precision(_TABLE[resolve(precision)][1])


def traced_call(precision: str | None, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
  """``fn(*args, compute_dtype=compute_dtype(precision), **kwargs)`` inside :func:`context`.

  For a jitted ``fn`` that runs a classifier in ``compute_dtype``: it is traced
  with ``precision``'s matmul precision in force, so its program keeps it.
  """
  with context(precision):
    return fn(*args, compute_dtype=compute_dtype(precision), **kwargs)
