"""Checks of the trainer's inputs and of a resumed run against its checkpoint.

* :func:`check_data`: a training or evaluation pair ``(x, y)``.
* :func:`split_sigma`: ``(x, y)`` or ``(x, y, sigma [N])`` with one noise level
  per input.
* :func:`check_compatible`: the training config and data of a checkpointed run
  against those of the run resuming it (:func:`rsjax.training.trainer.train`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from rsjax.training.config import LATER_FIELDS

__all__ = ["COMPAT_IGNORED", "check_compatible", "check_data", "split_sigma"]


def check_data(data: Sequence[npt.ArrayLike], name: str) -> tuple[np.ndarray, np.ndarray]:
  """Checks ``(x [N, ...] in [0, 1], y [N] int)``; returns them as float32 and int32."""
  try:
    x, y = data
  except (TypeError, ValueError):
    raise ValueError(f"{name} must be a pair (x, y) of arrays") from None
  x = np.asarray(x)
  y = np.asarray(y)
  if not np.issubdtype(x.dtype, np.floating):
    raise ValueError(f"{name}: x must be floating point in [0, 1], got dtype {x.dtype}")
  if x.ndim < 2 or y.ndim != 1 or x.shape[0] != y.shape[0] or x.shape[0] == 0:
    raise ValueError(
      f"{name}: expected x [N, ...] and y [N] with N >= 1, got {x.shape} and {y.shape}"
    )
  if not np.issubdtype(y.dtype, np.integer):
    raise ValueError(f"{name}: y must be integer labels, got dtype {y.dtype}")
  if y.min() < 0:
    raise ValueError(f"{name}: labels must be >= 0")
  lo, hi = float(np.min(x)), float(np.max(x))
  if not (math.isfinite(lo) and math.isfinite(hi)):
    raise ValueError(f"{name}: x contains NaN or inf")
  if lo < -1e-6 or hi > 1 + 1e-6:
    raise ValueError(
      f"{name}: x must lie in [0, 1] (noise is added in pixel scale and the model normalizes), "
      f"got range [{lo:.4g}, {hi:.4g}]"
    )
  return x.astype(np.float32, copy=False), y.astype(np.int32, copy=False)


#: fields a resumed run may change (more or fewer epochs).
COMPAT_IGNORED = ("epochs",)


def check_compatible(saved: Mapping, current: Mapping, what: str) -> None:
  """Raises unless a checkpoint's ``saved`` description matches the ``current`` run."""
  if what == "training config":
    saved = {**LATER_FIELDS, **saved}
  diff = {
    k: (saved.get(k), current.get(k))
    for k in set(saved) | set(current)
    if k not in COMPAT_IGNORED and saved.get(k) != current.get(k)
  }
  if diff:
    items = ", ".join(f"{k}: saved {a!r} vs now {b!r}" for k, (a, b) in sorted(diff.items()))
    raise ValueError(
      f"cannot resume: the {what} differs from the checkpointed run ({items}); use the same "
      "arguments, a new workdir, or resume=False"
    )


def split_sigma(
  train_data: Sequence[npt.ArrayLike],
) -> tuple[Sequence[npt.ArrayLike], np.ndarray | None]:
  """``(x, y)`` or ``(x, y, sigma [N])`` -> ``((x, y), sigma or None)``."""
  if isinstance(train_data, (tuple, list)) and len(train_data) == 3:
    x, y, sig = train_data
    sig = np.asarray(sig, np.float32)
    if sig.ndim != 1 or sig.shape[0] != np.shape(x)[0]:
      raise ValueError(
        f"train_data: per-input sigma must have shape [N] = [{np.shape(x)[0]}], got {sig.shape}"
      )
    if not (np.all(np.isfinite(sig)) and np.all(sig >= 0)):
      raise ValueError("train_data: per-input sigma must be finite and >= 0")
    return (x, y), sig
  return train_data, None
