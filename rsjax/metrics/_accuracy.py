"""Certified accuracy, ACR, abstention and the best-over-sigma envelope of result files,
and their summaries and tables."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

__all__ = [
  "abstention_rate",
  "acr",
  "average_certified_radius",
  "best_over_sigma",
  "certified_accuracy",
  "envelope",
  "fields",
  "format_table",
  "high_prob_certified_accuracy",
  "radius_grid",
  "samples_summary",
  "summarize",
]


def _arrays(correct, radius, predict=None) -> tuple[np.ndarray, np.ndarray]:
  correct = np.asarray(correct)
  radius = np.asarray(radius, dtype=np.float64)
  if correct.ndim != 1 or radius.ndim != 1 or correct.shape != radius.shape:
    raise ValueError(
      f"correct and radius must be 1-D of the same length, got {correct.shape} and {radius.shape}"
    )
  if correct.shape[0] == 0:
    raise ValueError("no results: correct and radius are empty")
  if correct.dtype != bool:
    if not np.all((correct == 0) | (correct == 1)):
      raise ValueError("correct must be boolean or 0/1")
    correct = correct.astype(bool)
  if np.any(np.isnan(radius)) or np.any(radius < 0):
    raise ValueError("radius must be >= 0 and not NaN")
  if predict is not None:
    predict = np.asarray(predict)
    if predict.shape != correct.shape:
      raise ValueError(f"predict has shape {predict.shape}, expected {correct.shape}")
    correct = correct & (predict != -1)
  return correct, radius


def radius_grid(stop: float, step: float = 0.25, start: float = 0.0) -> np.ndarray:
  """Radii ``start, start + step, ..., stop`` without floating-point drift.

  ``np.arange(0, 1.5 + 0.1, 0.1)`` gives 0.30000000000000004, which would make a
  radius of exactly 0.3 fail ``radius >= r``; this grid is rounded to 10 digits.

  Args:
    stop: the last radius (included when on the grid).
    step: spacing, > 0.
    start: first radius.

  Returns:
    ``[R]`` float64 radii.
  """
  if not step > 0:
    raise ValueError(f"step must be > 0, got {step!r}")
  if stop < start:
    raise ValueError(f"stop must be >= start, got start={start!r}, stop={stop!r}")
  k = int(math.floor((stop - start) / step + 1e-9)) + 1
  return np.round(start + step * np.arange(k), 10)


def certified_accuracy(
  correct: ArrayLike, radius: ArrayLike, radii: ArrayLike, *, predict: ArrayLike | None = None
) -> float | np.ndarray:
  """Certified accuracy at each radius: ``mean(correct & (radius >= r))``.

  Args:
    correct: ``[N]`` bool (or 0/1), the certified class equals the label.
    radius: ``[N]`` certified radii (0.0 on abstain).
    radii: a scalar or ``[R]`` radii.
    predict: optional ``[N]`` predictions; rows with -1 (abstain) count as wrong.

  Returns:
    A float for a scalar ``radii``, else ``[R]`` float64.
  """
  correct, radius = _arrays(correct, radius, predict)
  r = np.asarray(radii, dtype=np.float64)
  acc = np.mean(correct[None, :] & (radius[None, :] >= r.reshape(-1)[:, None]), axis=1)
  return float(acc[0]) if r.ndim == 0 else acc.reshape(r.shape)


def average_certified_radius(
  correct: ArrayLike, radius: ArrayLike, *, predict: ArrayLike | None = None
) -> float:
  """ACR: the mean over all inputs of the radius, counting 0 for wrong or abstain.

  Args:
    correct: ``[N]`` bool.
    radius: ``[N]`` certified radii.
    predict: optional ``[N]`` predictions; abstentions count 0.

  Returns:
    The average certified radius (float).
  """
  correct, radius = _arrays(correct, radius, predict)
  return float(np.mean(np.where(correct, radius, 0.0)))


acr = average_certified_radius


def abstention_rate(predict: ArrayLike) -> float:
  """Fraction of inputs on which the smoothed classifier abstains (``predict == -1``)."""
  predict = np.asarray(predict)
  if predict.ndim != 1 or predict.shape[0] == 0:
    raise ValueError(f"predict must be a non-empty 1-D array, got shape {predict.shape}")
  return float(np.mean(predict == -1))


def high_prob_certified_accuracy(
  correct: ArrayLike,
  radius: ArrayLike,
  radii: ArrayLike,
  *,
  alpha: float,
  rho: float,
  predict: ArrayLike | None = None,
) -> float | np.ndarray:
  """Certified accuracy lowered to hold with probability ``1 - rho`` (Cohen et al.).

  Each certificate is wrong with probability at most ``alpha``; with a Bernstein
  bound over the ``N`` test inputs, the returned value is a lower bound on the
  true certified accuracy of the smoothed classifier on the test distribution
  with probability at least ``1 - rho`` (``HighProbAccuracy`` of the reference
  ``analyze.py``)::

    acc - alpha - sqrt(alpha (1 - alpha) log(1/rho) / N) - log(1/rho) / (3 N)

  The value is not clipped at 0 (as in the reference).

  Args:
    correct, radius, radii, predict: as in :func:`certified_accuracy`.
    alpha: the failure probability used when certifying, in (0, 1).
    rho: the failure probability of this bound, in (0, 1).

  Returns:
    A float or ``[R]`` float64.
  """
  for name, v in (("alpha", alpha), ("rho", rho)):
    if not 0.0 < float(v) < 1.0:
      raise ValueError(f"{name} must lie in (0, 1), got {v!r}")
  correct, radius = _arrays(correct, radius, predict)
  n = correct.shape[0]
  acc = certified_accuracy(correct, radius, radii)
  log_term = math.log(1.0 / rho)
  return acc - alpha - math.sqrt(alpha * (1 - alpha) * log_term / n) - log_term / (3 * n)


def envelope(curves: Sequence[ArrayLike]) -> tuple[np.ndarray, np.ndarray]:
  """Pointwise maximum of several certified-accuracy curves.

  Args:
    curves: ``[S, R]`` certified accuracies of S result files at R radii.

  Returns:
    ``(best [R], which [R])``: the maximum over the S curves, and the index of the
    curve that attains it (the first on ties).
  """
  c = np.asarray(curves, dtype=np.float64)
  if c.ndim != 2 or c.shape[0] == 0:
    raise ValueError(f"curves must be [S, R] with S >= 1, got shape {c.shape}")
  return c.max(axis=0), c.argmax(axis=0)


def fields(res: Any) -> tuple[Any, Any, Any]:
  """``(correct, radius, predict or None)`` of certify results."""
  try:
    correct, radius = res.correct, res.radius
  except AttributeError:
    raise ValueError("results must have .correct and .radius (a certify file)") from None
  return correct, radius, getattr(res, "predict", None)


def best_over_sigma(results: Sequence, radii: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
  """Best certified accuracy over several result files at each radius.

  Args:
    results: a sequence of certify results (e.g. one per sigma), each with
      ``correct``, ``radius`` and optionally ``predict``.
    radii: ``[R]`` radii.

  Returns:
    ``(best [R], which [R])``: the envelope and, per radius, the index in
    ``results`` of the file that attains it.
  """
  if len(results) == 0:
    raise ValueError("results must not be empty")
  radii = np.atleast_1d(np.asarray(radii, dtype=np.float64))
  curves = []
  for res in results:
    correct, radius, predict = fields(res)
    curves.append(certified_accuracy(correct, radius, radii, predict=predict))
  return envelope(np.stack(curves))


def samples_summary(samples: ArrayLike) -> dict:
  """Mean and distribution of the samples used per input (budgeted CERTIFY).

  Args:
    samples: ``[N]`` estimation samples per input (the ``samples`` column).

  Returns:
    A dict with ``mean``, ``min``, ``p10``, ``median``, ``p90`` and ``max``.
  """
  s = np.asarray(samples, dtype=np.float64)
  if s.ndim != 1 or s.shape[0] == 0 or not np.all(np.isfinite(s)):
    raise ValueError(f"samples must be a non-empty 1-D array of numbers, got shape {s.shape}")
  q = np.percentile(s, [0, 10, 50, 90, 100])
  return {
    "mean": float(s.mean()),
    **dict(zip(("min", "p10", "median", "p90", "max"), q, strict=True)),
  }


def _samples_of(results):
  extra = getattr(results, "extra", None) or {}
  s = extra.get("samples")
  return None if s is None or s.dtype == object else s


def summarize(results: Any, radii: ArrayLike) -> dict:
  """Summary of one certify file.

  Args:
    results: certify results with ``correct``, ``radius``, ``predict`` (and
      optionally ``time``).
    radii: ``[R]`` radii for the certified accuracies.

  Returns:
    A dict with ``n``, ``accuracy`` (certified accuracy at radius 0, i.e. the
    accuracy of the smoothed classifier with abstain counted wrong),
    ``abstention``, ``acr``, ``radii`` ``[R]``, ``certified_accuracy`` ``[R]`` and
    ``mean_time`` (seconds, NaN when there is no time column) and, for files of
    budgeted CERTIFY (a ``samples`` column), ``samples`` (:func:`samples_summary`).
  """
  correct, radius, predict = fields(results)
  radii = np.atleast_1d(np.asarray(radii, dtype=np.float64))
  correct_b, _ = _arrays(correct, radius, predict)
  t = getattr(results, "time", None)
  samples = _samples_of(results)
  return {
    **({"samples": samples_summary(samples)} if samples is not None else {}),
    "n": int(correct_b.shape[0]),
    "accuracy": float(np.mean(correct_b)),
    "abstention": abstention_rate(predict) if predict is not None else float("nan"),
    "acr": average_certified_radius(correct, radius, predict=predict),
    "radii": radii,
    "certified_accuracy": certified_accuracy(correct, radius, radii, predict=predict),
    "mean_time": float(np.mean(t)) if t is not None and len(t) else float("nan"),
  }


def format_table(
  results: Mapping,
  radii: ArrayLike,
  *,
  fmt: str = "text",
  digits: int = 3,
  show_envelope: bool = False,
) -> str:
  """Table of certified accuracy at radii, with ACR and abstention, one row per file.

  The best value of each radius column is marked (``*``) when there are several
  rows, as in the reference ``analyze.py``. When a file has a ``samples`` column
  (budgeted CERTIFY), the mean and the 10% / 50% / 90% quantiles of the samples
  per input follow the certified accuracies.

  Args:
    results: mapping ``label -> certify results`` (insertion order kept).
    radii: ``[R]`` radii (columns).
    fmt: ``"text"`` (aligned columns) or ``"markdown"``.
    digits: decimals printed.
    show_envelope: add a row with the best value over the rows at each radius.

  Returns:
    The table as a string (no trailing newline).
  """
  if fmt not in ("text", "markdown"):
    raise ValueError(f"fmt must be 'text' or 'markdown', got {fmt!r}")
  if not results:
    raise ValueError("results must not be empty")
  radii = np.atleast_1d(np.asarray(radii, dtype=np.float64))
  labels = [str(k) for k in results]
  sums = [summarize(v, radii) for v in results.values()]
  acc = np.stack([s["certified_accuracy"] for s in sums])
  best = acc.max(axis=0)
  mark = len(sums) > 1
  budgeted = any("samples" in s for s in sums)
  header = ["", *[f"r={r:g}" for r in radii], "ACR", "abstain", "n"]
  header += ["samples mean", "p10/p50/p90"] if budgeted else []
  rows = []
  for label, s, a in zip(labels, sums, acc, strict=True):
    cells = [
      f"{v:.{digits}f}" + ("*" if mark and v == b else "") for v, b in zip(a, best, strict=True)
    ]
    rows.append(
      [label, *cells, f"{s['acr']:.{digits}f}", f"{s['abstention']:.{digits}f}", str(s["n"])]
    )
    if budgeted:
      q = s.get("samples")
      rows[-1] += (
        ["", ""]
        if q is None
        else [f"{q['mean']:.0f}", f"{q['p10']:.0f}/{q['median']:.0f}/{q['p90']:.0f}"]
      )
  if show_envelope:
    rows.append(["envelope", *[f"{v:.{digits}f}" for v in best], "", "", ""] + ["", ""] * budgeted)
  if fmt == "markdown":
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)
  widths = [max(len(r[j]) for r in [header, *rows]) for j in range(len(header))]
  out = []
  for r in [header, *rows]:
    cells = enumerate(zip(r, widths, strict=True))
    out.append("  ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in cells))
  return "\n".join(line.rstrip() for line in out)
