"""The analyses of the ACR study (Sun et al., seed 003): ``p_A`` of each input from its
saved estimation counts, certified accuracy on easy vs hard inputs, and Theorem 1 made
concrete."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from rsjax.metrics._accuracy import certified_accuracy, fields

__all__ = [
  "COUNTS_COLUMN",
  "constant_classifier_budget",
  "easy_hard_accuracy",
  "format_counts",
  "label_probability",
  "parse_counts",
]


#: Name of the extra result-file column holding an input's estimation counts
#: (``rsjax certify --save-counts``), written as ``c_0,c_1,...,c_{K-1}``.
COUNTS_COLUMN = "counts"


def format_counts(counts: ArrayLike) -> str:
  """One row's ``[K]`` class counts as the text of the ``counts`` column."""
  return ",".join(str(int(c)) for c in np.asarray(counts).reshape(-1))


def parse_counts(column: Iterable) -> np.ndarray:
  """The ``counts`` column of a result file as ``[N, K]`` int64."""
  rows = [[int(v) for v in str(text).split(",")] for text in column]
  if len({len(r) for r in rows}) > 1:
    raise ValueError("the counts column has rows with different numbers of classes")
  return np.asarray(rows, dtype=np.int64).reshape(len(rows), -1)


def label_probability(results: Any) -> np.ndarray:
  """Empirical ``p_A`` of each input: the fraction of its estimation samples on its label.

  This is the quantity whose distribution Sun et al. (2025, Figure 3) plot and
  by which they split easy (``p_A >= 0.5``) from hard inputs. It is the plain
  fraction (no confidence bound) of the ``n`` noisy samples of CERTIFY.

  Args:
    results: certify results with ``label`` and the ``counts`` extra column
      (``rsjax certify --save-counts``, or written by the ACR study).

  Returns:
    ``[N]`` float64 in [0, 1].

  Raises:
    ValueError: the results carry no counts.
  """
  extra = getattr(results, "extra", {}) or {}
  if COUNTS_COLUMN not in extra:
    raise ValueError("the result file has no 'counts' column; certify with --save-counts")
  counts = parse_counts(extra[COUNTS_COLUMN])
  label = np.asarray(results.label, np.int64)
  if np.any(label >= counts.shape[1]):
    raise ValueError("a label is outside the counted classes")
  total = counts.sum(axis=1)
  return counts[np.arange(len(label)), label] / np.maximum(total, 1)


def easy_hard_accuracy(
  results: Any, reference_pa: ArrayLike, radii: ArrayLike, *, threshold: float = 0.5
) -> dict:
  """Certified accuracy on easy and hard inputs, split by a reference model's ``p_A``.

  Sun et al. (2025, Section 4.3) call an input hard when a Gaussian-trained
  reference model has ``p_A < 0.5`` on it (it misclassifies the majority of
  noisy copies) and show that ACR-oriented training lowers the accuracy on
  those. Splitting every model by the *same* reference keeps the subsets fixed.

  Args:
    results: certify results (``correct``, ``radius``, ``predict``, ``idx``).
    reference_pa: mapping ``idx -> p_A`` of the reference model, or a pair
      ``(idx [M], p_A [M])``; must cover every ``idx`` of ``results``.
    radii: ``[R]`` radii.
    threshold: easy means ``p_A >= threshold``.

  Returns:
    ``{"easy": [R], "hard": [R], "num_easy": int, "num_hard": int}`` (curves are
    NaN for an empty subset).
  """
  if isinstance(reference_pa, Mapping):
    ref = reference_pa
  else:
    idx, pa = reference_pa
    ref = dict(zip(np.asarray(idx).tolist(), np.asarray(pa, np.float64).tolist(), strict=False))
  idx = np.asarray(results.idx).tolist()
  missing = [i for i in idx if i not in ref]
  if missing:
    raise ValueError(f"the reference has no p_A for idx {missing[:5]} (certify the same inputs)")
  easy = np.asarray([ref[i] >= threshold for i in idx])
  correct, radius, predict = fields(results)
  radii = np.atleast_1d(np.asarray(radii, dtype=np.float64))
  out = {"num_easy": int(easy.sum()), "num_hard": int((~easy).sum())}
  for name, mask in (("easy", easy), ("hard", ~easy)):
    if mask.any():
      out[name] = certified_accuracy(
        np.asarray(correct)[mask],
        np.asarray(radius)[mask],
        radii,
        predict=None if predict is None else np.asarray(predict)[mask],
      )
    else:
      out[name] = np.full(radii.shape, np.nan)
  return out


def constant_classifier_budget(margin: float, num_classes: int, sigma: float, alpha: float) -> int:
  """Sampling budget N at which a constant classifier's ACR exceeds ``margin`` (Theorem 1).

  Sun et al. (2025, Theorem 1): a classifier that always predicts the most
  frequent class c* (at least 1/K of the inputs) gets ``p_A = 1`` on the inputs
  of c*, whose Clopper-Pearson bound after N of N successes is
  ``alpha^(1/N)``, so ``ACR >= sigma * Phi^-1(alpha^(1/N)) / K``. That exceeds
  ``M`` once ``alpha^(1/N) > Phi(M K / sigma)``, i.e. for

    ``N = ceil(log(alpha) / log(Phi(M K / sigma))) + 1``.

  (The paper prints the fraction upside down, ``log Phi / log alpha``, which
  gives N = 2 for any reasonable M.)

  Args:
    margin: M > 0, the ACR to exceed.
    num_classes: K.
    sigma: noise level.
    alpha: CERTIFY's error level.

  Returns:
    N (int). With N estimation samples (and the n0 selection picking c*), the
    ACR of the constant classifier on a class-balanced set exceeds ``margin``.
  """
  from scipy.stats import norm

  from rsjax import stats

  alpha = stats.check_alpha(alpha)
  if not (margin > 0 and math.isfinite(margin)):
    raise ValueError(f"margin must be > 0, got {margin!r}")
  stats.check_integral("num_classes", num_classes)
  if not (sigma > 0 and math.isfinite(sigma)):
    raise ValueError(f"sigma must be > 0, got {sigma!r}")
  log_phi = norm.logcdf(margin * num_classes / sigma)
  if log_phi == 0.0:
    raise ValueError(f"Phi(M K / sigma) rounds to 1 in float64: M = {margin} is out of reach")
  return int(math.ceil(math.log(alpha) / log_phi)) + 1
