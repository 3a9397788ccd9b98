"""Samples per second against the batch size (``rsjax bench --plot``, ``--twin``): the
estimation pass (``rsjax.sample_counts``, what ``certify`` runs for its N samples) of one image
at a few batch sizes, each compiled first and then timed in rounds (:mod:`rsjax.app.bench.rounds`:
3 rounds of 1 s at least, minimum, median and maximum) over the same number of samples a call,
at least :data:`CHUNKS` batches. The run's own batch (the automatic one, by default) is timed
first; the sweep stops early once it has used its time budget (each batch size is a new program
to compile). :func:`best_point` sets the run's batch beside the best point of the sweep."""

from __future__ import annotations

import os
import time
from typing import Any

import jax
import numpy as np

from rsjax.app.bench import rounds
from rsjax.app.bench.target import Target

__all__ = ["BUDGET_S", "CHUNKS", "MAX_POINTS", "batch_sizes", "best_point", "plot", "sweep"]

#: Batches per timed call of a sweep point.
CHUNKS = 4
#: Points of a sweep at most.
MAX_POINTS = 6
#: Seconds a sweep may take: it stops after the point that passes them.
BUDGET_S = 60.0


def batch_sizes(largest: int, samples_per_s: float, *, max_call_s: float = 2.0) -> list[int]:
  """Powers of two from 1 up to ``largest`` (and ``largest`` itself), the largest
  :data:`MAX_POINTS` of them whose timed call of :data:`CHUNKS` batches takes at most
  ``max_call_s`` at ``samples_per_s``."""
  sizes = [2**k for k in range(int(largest).bit_length()) if 2**k < largest]
  sizes.append(max(1, int(largest)))
  fits = [s for s in sizes if CHUNKS * s <= max_call_s * samples_per_s] or sizes[:1]
  return fits[-MAX_POINTS:]


def point_samples(batch: int, samples: int) -> int:
  """The samples of one timed call at ``batch``: ``samples`` in whole batches, at least
  :data:`CHUNKS` of them."""
  return batch * max(CHUNKS, -(-samples // batch))


def _point(
  target: Target, x: np.ndarray, batch: int, samples: int, precision: str
) -> dict[str, Any]:
  import rsjax
  from rsjax.util import compile_clock

  num = point_samples(batch, samples)

  def call(_: int = 0) -> None:
    counts = rsjax.sample_counts(
      jax.random.key(0),
      target.apply_fn,
      target.params,
      x,
      sigma=target.sigma,
      num_classes=target.num_classes,
      num=num,
      batch_size=batch,
      precision=precision,
    )
    np.asarray(counts)

  with compile_clock() as clock:
    call()
  timing = rounds.time_rounds(call, num)
  return {"batch": batch, "samples": num, **timing.as_dict(), "compile_s": clock[0]}


def sweep(
  target: Target,
  x: np.ndarray,
  batches: list[int],
  precision: str,
  *,
  samples: int,
  first: int | None = None,
  budget_s: float | None = None,
  progress: bool = False,
) -> list[dict[str, Any]]:
  """One point per batch size (``x``: one image ``[1, *input_shape]``), each timed over
  ``samples`` samples a call (rounded up to whole batches); ``first`` (the run's batch, when
  among ``batches``) first, then the others in increasing order; stops after the point that
  passes ``budget_s`` seconds in all (:data:`BUDGET_S`). The points in increasing batch order."""
  from tqdm.auto import tqdm

  budget_s = BUDGET_S if budget_s is None else budget_s
  order = sorted(batches, key=lambda b: (b != first, b))
  points, start = [], time.perf_counter()
  bar = tqdm(order, desc=f"  sweep {precision}", unit="batch", disable=not progress)
  for b in bar:
    points.append({"precision": precision, **_point(target, x, b, samples, precision)})
    if time.perf_counter() - start > budget_s:
      break
  bar.close()
  return sorted(points, key=lambda p: p["batch"])


def best_point(points: list[dict[str, Any]], batch: int, *, auto: bool) -> dict[str, Any] | None:
  """The run's ``batch`` (``auto``: chosen automatically) beside the best point of the sweep
  ``points`` (one precision; median samples per second), None without points: ``batch``,
  ``auto``, ``samples_per_s`` (None when the batch is not among the points), ``best_batch``,
  ``best_samples_per_s``, ``gain`` (best over the batch's, less 1; None as ``samples_per_s``)."""
  if not points:
    return None
  best = max(points, key=lambda p: p["samples_per_s"])
  mine = next((p["samples_per_s"] for p in points if p["batch"] == batch), None)
  return {
    "precision": best["precision"],
    "batch": batch,
    "auto": auto,
    "samples_per_s": mine,
    "best_batch": best["batch"],
    "best_samples_per_s": best["samples_per_s"],
    "gain": None if mine is None else best["samples_per_s"] / mine - 1,
  }


def plot(points: list[dict[str, Any]], path: str, *, title: str) -> str:
  """Samples per second against the batch size, one line per precision; saved to ``path``."""
  from matplotlib.backends.backend_agg import FigureCanvasAgg
  from matplotlib.figure import Figure

  fig = Figure(figsize=(6, 4))  # an Agg canvas: pyplot's global backend is left alone
  FigureCanvasAgg(fig)
  ax = fig.add_subplot()
  for precision in dict.fromkeys(p["precision"] for p in points):
    mine = [p for p in points if p["precision"] == precision]
    ax.plot([p["batch"] for p in mine], [p["samples_per_s"] for p in mine], "o-", label=precision)
  ax.set_xscale("log", base=2)
  ax.set_ylim(bottom=0)
  ax.set_xlabel("batch size (forward passes per step)")
  ax.set_ylabel("noisy samples per second")
  ax.set_title(title, fontsize=9)
  ax.grid(True, alpha=0.3)
  ax.legend()
  fig.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  fig.savefig(path, dpi=120)
  return path
