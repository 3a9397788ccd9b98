"""Samples per second against the batch size (``rsjax bench --plot``): the estimation pass
(``rsjax.sample_counts``, what ``certify`` runs for its N samples) of one image at a few
batch sizes, each compiled first and then timed (the better of two calls under half a second) over the same number
of samples, at least :data:`CHUNKS` batches. The sweep stops early once it has used its time
budget (each batch size is a new program to compile)."""

from __future__ import annotations

import os
import time
from typing import Any

import jax
import numpy as np

from rsjax.app.bench.target import Target

__all__ = ["CHUNKS", "MAX_POINTS", "batch_sizes", "plot", "sweep"]

#: Batches per timed call of a sweep point.
CHUNKS = 4
#: Points of a sweep at most.
MAX_POINTS = 6


def batch_sizes(largest: int, samples_per_s: float, *, max_call_s: float = 2.0) -> list[int]:
  """Powers of two from 1 up to ``largest`` (and ``largest`` itself), the largest
  :data:`MAX_POINTS` of them whose timed call of :data:`CHUNKS` batches takes at most
  ``max_call_s`` at ``samples_per_s``."""
  sizes = []
  b = 1
  while b < largest:
    sizes.append(b)
    b *= 2
  sizes.append(max(1, int(largest)))
  fits = [s for s in sizes if CHUNKS * s <= max_call_s * samples_per_s] or sizes[:1]
  return fits[-MAX_POINTS:]


def _point(
  target: Target, x: np.ndarray, batch: int, samples: int, precision: str
) -> dict[str, Any]:
  import rsjax
  from rsjax.util import compile_clock

  num = batch * max(CHUNKS, -(-samples // batch))  # whole batches, at least CHUNKS of them

  def call() -> None:
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
  t = time.perf_counter()
  call()
  seconds = time.perf_counter() - t
  if seconds < 0.5:  # a short call: the better of two
    t = time.perf_counter()
    call()
    seconds = min(seconds, time.perf_counter() - t)
  return {
    "batch": batch,
    "samples": num,
    "seconds": seconds,
    "samples_per_s": num / seconds,
    "compile_s": clock[0],
  }


def sweep(
  target: Target,
  x: np.ndarray,
  batches: list[int],
  precision: str,
  *,
  samples: int,
  budget_s: float = 40.0,
  progress: bool = False,
) -> list[dict[str, Any]]:
  """One point per batch size (``x``: one image ``[1, *input_shape]``), each timed over
  ``samples`` samples (rounded up to whole batches), in increasing order; stops after the
  point that passes ``budget_s`` seconds in all."""
  from tqdm.auto import tqdm

  points = []
  start = time.perf_counter()
  bar = tqdm(batches, desc=f"  sweep {precision}", unit="batch", disable=not progress)
  for b in bar:
    points.append({"precision": precision, **_point(target, x, b, samples, precision)})
    if time.perf_counter() - start > budget_s:
      break
  bar.close()
  return points


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
