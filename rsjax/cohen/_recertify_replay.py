"""Replay of the parent's noise (``rsjax recertify --replay``): the child runs on the parent's
own estimation samples and is compared with the parent's stored votes, so a disagreement
sample costs one forward pass of the child and none of the parent (the paper's
``certify_with_cache``, Ugare et al., ICLR 2024).

The votes. ``<parent>.votes.npz`` holds, for each row of the parent run (dataset index
``ids``), its selection class ``c_A`` (the argmax of the recorded ``counts0``, Cohen's guess)
and one bit per estimation sample ``j < N``: whether the parent's class on sample ``j`` (the
noise of ``fold_in(fold_in(fold_in(K, 1), id), j)``, ``K`` the parent run's key, as the engine
drew it) is ``c_A``. They are drawn again from the parent's model once per parent
(``rsjax recertify --replay`` does it when the file is missing) and must agree with the
parent's record: each row's bits add up to its recorded count of ``c_A``. A child run names
the file's SHA-256 (option ``replay``), which binds it to its claim and key.

The bound. With ``d`` the number of samples ``j < n`` on which the parent voted ``c_A`` and the
child did not, the one-sided Clopper-Pearson bound ``zeta_upper`` of ``d`` at ``alpha_2``
bounds ``P(parent = c_A, child != c_A)``, and ``P(child = c_A) >= P(parent = c_A) - P(parent =
c_A, child != c_A) >= p_A_lower - zeta_upper`` unless the parent's bound or the disagreement's
fails: a union bound of two marginal failures, whatever their dependence (they share the
samples), so each bound row holds at ``alpha_1 + alpha_2``. The bits say nothing of the other
classes, so a replayed child is binary (Cohen's radius of that bound).

The switch. The paper's switch reads the parent's ``p_A_lower``, a function of the estimation
samples that the replayed disagreement shares; its authors then certify the switched rows at
``alpha_1`` alone. Here a replayed child switches on the parent's *selection* counts: a row is
certified from scratch (fresh noise, ``alpha_1 + alpha_2``) where ``counts0[c_A] >= gamma *
n0``. That event is a function of the selection noise only: given the selection (which also
fixes ``c_A``), the parent's estimation bound fails with probability at most ``alpha_1`` and the
disagreement's at most ``alpha_2``, and the switched rows' fresh noise is independent of both,
so every row, switched or not, holds at ``alpha_1 + alpha_2``.
"""

from __future__ import annotations

import dataclasses
import os

import jax
import numpy as np

from rsjax.cohen._recertify_check import file_sha256, read_votes
from rsjax.cohen._recertify_parent import row_positions
from rsjax.engine.driver import ESTIMATION, EngineCounts, Sampling
from rsjax.engine.rounds import round_sampler

__all__ = [
  "ParentVotes",
  "parent_key",
  "sample_votes",
  "write_votes",
]


def parent_key(run) -> jax.Array:
  """The estimation key ``fold_in(K, 1)`` of a run record ``run`` (``RunSpec``): ``K`` its
  ``jax.random.key(seed)`` folded with ``RunSpec.key_path``, as its certify run drew it."""
  k = jax.random.key(run.seed)
  for v in run.key_path():
    k = jax.random.fold_in(k, v)
  return jax.random.fold_in(k, ESTIMATION)


def sample_votes(
  key: jax.Array,
  apply_fn,
  params,
  x: np.ndarray,
  sig: np.ndarray,
  ids: np.ndarray,
  classes: np.ndarray,
  *,
  num: int,
  num_classes: int,
  settings: Sampling,
) -> np.ndarray:
  """``[B, num]`` bool: whether the classifier's class on sample ``j < num`` of each input is
  ``classes[i]``, the samples the engine draws from ``key`` (``rsjax.engine.rounds``: sample
  ``j`` of input ``ids[i]`` from ``fold_in(fold_in(key, ids[i]), j)``, so the bits add up to
  ``rsjax.sample_counts(key, ...)[i, classes[i]]``).

  Args:
    key: the pass's key (a parent run's estimation key: :func:`parent_key`).
    apply_fn, params: the classifier.
    x, sig, ids: inputs prepared by ``rsjax.engine.counts.prepare_inputs``.
    classes: ``[B]`` the class each input's bits test.
    num: samples per input.
    num_classes: C.
    settings: the noise, precision and batch of the classifier (an integer batch).
  """
  if isinstance(settings.batch_size, str):
    settings = settings.replace(batch_size=None)
  settings = settings.replace(n=int(num))
  source = EngineCounts(apply_fn, params, x, sig, ids, num_classes, settings)
  sample = round_sampler(key, source, settings)
  return sample(np.arange(len(x)), 0, int(num)) == np.asarray(classes)[:, None]


def write_votes(path: str, ids, classes, bits: np.ndarray) -> str:
  """Writes the votes (``ids [M]``, ``classes [M]``, ``bits [M, N]`` bool) to ``path``
  atomically; returns the file's SHA-256."""
  tmp = f"{path}.tmp-{os.getpid()}"
  with open(tmp, "wb") as f:
    np.savez(
      f,
      ids=np.asarray(ids, np.int64),
      classes=np.asarray(classes, np.int64),
      n=np.int64(bits.shape[1]),
      bits=np.packbits(np.asarray(bits, bool), axis=1, bitorder="little"),
    )
  os.replace(tmp, path)
  return file_sha256(path)


@dataclasses.dataclass(frozen=True)
class ParentVotes:
  """The parent's stored votes and its estimation key.

  Attributes:
    ids: ``[M]`` the parent's rows (dataset indices).
    classes: ``[M]`` each row's ``c_A``.
    bits: ``[M, ceil(n / 8)]`` uint8, the votes packed little-endian along samples.
    n: the parent's estimation samples ``N``.
    key: the parent's estimation key (:func:`parent_key`).
  """

  ids: np.ndarray
  classes: np.ndarray
  bits: np.ndarray
  n: int
  key: jax.Array

  @classmethod
  def read(cls, path: str, key: jax.Array) -> ParentVotes:
    """The votes in ``path`` of the parent run whose estimation key is ``key``.

    Raises:
      ValueError: the file is unreadable or inconsistent.
    """
    ids, classes, n, bits = read_votes(path)
    return cls(ids, classes, bits, n, key)

  def rows(self, ids: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(classes [b], votes [b, n] bool)`` of dataset indices ``ids``, the first ``n`` samples.

    Raises:
      ValueError: ``n`` is more than the parent's samples, or a row is missing.
    """
    if n > self.n:
      raise ValueError(f"a replayed child takes at most the parent's {self.n} samples, not {n}")
    at = row_positions(self.ids, np.asarray(ids, np.int64))
    votes = np.unpackbits(self.bits[at], axis=1, count=self.n, bitorder="little")
    return self.classes[at], votes[:, :n].astype(bool)
