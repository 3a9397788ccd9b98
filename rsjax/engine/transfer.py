"""Host <-> device movement of the counts engine: what one CERTIFY call sends and
brings back.

* **Inputs placed once per call** (:class:`Placement`): the parameters, and the
  padded inputs of a given padded length, are placed on the mesh once and reused
  by every pass of the call (CERTIFY's selection and estimation), instead of a
  ``device_put`` of the whole parameter tree per pass.
* **One wait per call** (:func:`resolve_all`): the counts of several dispatched
  passes (:class:`PendingCounts`) come back in one ``jax.device_get``, so the
  host waits once for all of them.
* **Keys folded in one launch** (:func:`fold_keys`): ``fold_in(key, i)`` for
  several ``i`` as one compiled program rather than one eager launch each.

None of this changes a result: the same values reach the same programs.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TypeVar

import jax
import numpy as np
from jax.typing import ArrayLike

from rsjax.util import PyTree, replicate

__all__ = [
  "PendingCounts",
  "Placement",
  "check_finite_outputs",
  "fold_keys",
  "resolve_all",
  "resolve_counts",
]


class PendingCounts:
  """Counts of one engine launch, dispatched but not yet brought to the host.

  JAX dispatches the launch asynchronously; :meth:`result` waits for it and
  transfers the counts (the only device-to-host transfer of a pass), so a
  caller can dispatch several passes (CERTIFY's selection and estimation)
  before the host waits once (:func:`resolve_all`).
  """

  def __init__(self, partial: jax.Array, num_inputs: int, ids: np.ndarray, num: int):
    self._partial: jax.Array | None = partial
    self._num_inputs, self._ids, self._num = num_inputs, ids, num
    self._result: np.ndarray | None = None

  def result(self) -> np.ndarray:
    """``[B, num_classes]`` int32 NumPy counts (waits for the launch once).

    Raises:
      FloatingPointError: some sample's logits were NaN or inf.
    """
    if self._result is None:
      assert self._partial is not None
      self._finish(fetch([self._partial])[0])
    assert self._result is not None
    return self._result

  def _finish(self, partial: np.ndarray) -> None:
    # [devices, B_pad, C + 1] partial counts -> [B, C] on the host (a few KB).
    total = np.asarray(partial, dtype=np.int64).sum(axis=0)
    total = total[: self._num_inputs]
    check_finite_outputs(total[:, -1], self._ids, self._num)
    self._result, self._partial = total[:, :-1].astype(np.int32), None


def fetch(arrays: Sequence[jax.Array]) -> list[np.ndarray]:
  """``arrays`` on the host, in one ``jax.device_get`` (one wait for all of them)."""
  return list(jax.device_get(list(arrays)))


_Counts = TypeVar("_Counts")


def resolve_counts(counts: PendingCounts | _Counts) -> np.ndarray | _Counts:
  """``counts`` itself, or the NumPy counts of a :class:`PendingCounts`."""
  return counts.result() if isinstance(counts, PendingCounts) else counts


def resolve_all(*counts: object) -> list:
  """:func:`resolve_counts` of each argument, the pending ones brought back in one wait.

  The finite-output check runs in argument order, as resolving them one by one
  would.
  """
  pending = [
    (c, c._partial)
    for c in counts
    if isinstance(c, PendingCounts) and c._result is None and c._partial is not None
  ]
  if pending:
    for (c, _), host in zip(pending, fetch([p for _, p in pending]), strict=True):
      c._finish(host)
  return [resolve_counts(c) for c in counts]


class Placement:
  """What one call has already placed on a mesh (``replicate``), reused by its passes.

  Owned by one call's counts source, whose parameters and inputs are fixed:
  entries are keyed by the mesh (and, for the inputs, their padded length), not
  by the values.
  """

  def __init__(self) -> None:
    self._placed: dict[tuple, PyTree] = {}

  def params(self, mesh: jax.sharding.Mesh, params: PyTree) -> PyTree:
    """``replicate(mesh, params)``, placed on the first call only.

    On a one-device mesh, parameters that are all uncommitted JAX arrays (as
    a model's are) go to the launch as they are: it places them itself, while
    a ``device_put`` of the tree costs some microseconds a leaf every call.
    """
    k = ("params", mesh)
    if k not in self._placed:
      as_given = mesh.size == 1 and all(
        isinstance(leaf, jax.Array) and not leaf.committed for leaf in jax.tree.leaves(params)
      )
      self._placed[k] = params if as_given else replicate(mesh, params)
    return self._placed[k]

  def inputs(
    self, mesh: jax.sharding.Mesh, x: np.ndarray, sig: np.ndarray, ids: np.ndarray
  ) -> PyTree:
    """``replicate(mesh, (x, sig, ids))`` of the padded inputs, once per padded length."""
    k = ("inputs", mesh, x.shape[0])
    if k not in self._placed:
      self._placed[k] = replicate(mesh, (x, sig, ids))
    return self._placed[k]


@functools.partial(jax.jit, static_argnums=1)
def _fold_jit(key: jax.Array, data: tuple[int, ...]) -> list[jax.Array]:
  return [jax.random.fold_in(key, i) for i in data]


def fold_keys(key: jax.Array, data: Sequence[int]) -> list[jax.Array]:
  """``[jax.random.fold_in(key, i) for i in data]`` in one launch (the same keys).

  Args:
    key: a typed key (``rsjax.util.as_key``).
    data: the integers to fold in.

  Returns:
    One key per entry of ``data``.
  """
  return _fold_jit(key, tuple(int(i) for i in data))


def check_finite_outputs(num_bad: ArrayLike, ids: np.ndarray, num: int) -> None:
  """Raises if any input had noise samples with non-finite logits.

  Args:
    num_bad: ``[B]`` number of samples with NaN/inf logits per input.
    ids: ``[B]`` ids of the inputs (named in the message).
    num: samples drawn per input.

  Raises:
    FloatingPointError: naming the ids of the affected inputs.
  """
  num_bad = np.asarray(num_bad)
  if np.any(num_bad > 0):
    hit = np.flatnonzero(num_bad > 0)
    names = ", ".join(str(int(ids[i])) for i in hit[:10]) + (", ..." if len(hit) > 10 else "")
    raise FloatingPointError(
      f"the base classifier returned NaN or inf logits for {int(num_bad.sum())} of "
      f"{num * len(num_bad)} noise samples, on the inputs with ids [{names}]; no certificate or "
      "prediction is made from non-finite outputs"
    )
