"""Timing ``rsjax.certify`` of a loaded model at one precision.

One warm-up image first: its compile-phase seconds (``rsjax.util.compile_clock``: trace,
lowering, backend compile) are the compile time, reported apart. Then ``images`` images, one
``certify`` call each (n0 selection samples, then N estimation samples, host statistics
included), at the measured N, in rounds (:mod:`rsjax.app.bench.rounds`: 3 rounds of 1 s at least,
the images taken in turn, each at least once); the median round is the figure quoted, the
minimum and the maximum beside it. The target N is reached by extrapolation at the measured
samples per second unless the run was at the target N (``--full``): a measured call's fixed
costs are spread over fewer samples, so the extrapolated seconds per image are an upper
estimate.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import warnings
from typing import Any

import jax
import numpy as np

from rsjax.app.bench import machine, rounds
from rsjax.app.bench.peaks import Peaks, bound_seconds, peak_key
from rsjax.app.bench.target import Target

__all__ = [
  "ALPHA",
  "MAX_AUTO_IMAGES",
  "Plan",
  "Throughput",
  "choose_measure_n",
  "extrapolate",
  "figures",
  "resolve_batch",
  "time_certify",
]

ALPHA = 0.001
#: Timed images when ``--images`` is not given: as many as fit in :data:`TIMED_BUDGET_S`, 1 to 5.
MAX_AUTO_IMAGES = 5
TIMED_BUDGET_S = 20.0
#: Seconds one image at the measured N should take when the measured N is chosen (``auto``).
IMAGE_BUDGET_S = 4.0
#: An assumed share of the peak the certification reaches, to choose the measured N only.
_ASSUMED_EFFICIENCY = 0.3


@dataclasses.dataclass(frozen=True)
class Plan:
  """What to measure: Cohen et al.'s n0 and target N, the N measured, the images timed
  (None: as many as fit in :data:`TIMED_BUDGET_S`), the batch (``"auto"``: fitted to memory)."""

  n0: int
  target_n: int
  measure_n: int
  images: int | None
  batch: int | str
  seed: int = 0

  @property
  def extrapolated(self) -> bool:
    return self.measure_n != self.target_n


@dataclasses.dataclass(frozen=True)
class Throughput:
  """What one precision measured (``timing``: its rounds of ``certify`` calls, one image a
  call, ``images`` images in turn), and what it gives at the target N."""

  precision: str
  batch: int
  compile_s: float
  first_call_s: float
  timing: rounds.Rounds  # its samples: n0 + measured N, one image
  images: int
  target_samples: int  # n0 + target N per image
  peak_memory: dict[str, Any]

  @property
  def measured_samples(self) -> int:
    """n0 + the measured N: the samples of one image."""
    return self.timing.samples

  @property
  def seconds(self) -> tuple[float, ...]:
    """Seconds per image at the measured N, of each round."""
    return tuple(self.timing.per_call)

  @property
  def seconds_per_image_measured(self) -> float:
    """Of the median round."""
    return statistics.median(self.seconds)

  @property
  def samples_per_s(self) -> float:
    return self.measured_samples / self.seconds_per_image_measured

  @property
  def seconds_per_image(self) -> float:
    """Seconds per image at the target N (extrapolated unless measured there)."""
    return extrapolate(self.seconds_per_image_measured, self.measured_samples, self.target_samples)


def extrapolate(seconds: float, measured_samples: int, target_samples: int) -> float:
  """Seconds per image at ``target_samples`` from ``seconds`` at ``measured_samples``, at
  the measured samples per second."""
  return float(seconds) * int(target_samples) / int(measured_samples)


def choose_measure_n(
  *,
  n0: int,
  target_n: int,
  flops_per_sample: float,
  peak_flops: float | None,
  cap: int,
  floor: int = 50,
) -> int:
  """The N to measure at when none is given: what one image does in about
  :data:`IMAGE_BUDGET_S` at an assumed 30% of the peak, between ``floor`` and ``cap``, never
  above ``target_n``; ``cap`` without a peak."""
  n = cap
  if peak_flops and flops_per_sample > 0:
    rate = _ASSUMED_EFFICIENCY * peak_flops / flops_per_sample
    n = int(rate * IMAGE_BUDGET_S) - n0
    n = max(floor, min(cap, n))
    n = int(round(n, -int(math.log10(n)) + 1))  # two significant digits
  return max(1, min(int(target_n), n))


def _certify(target: Target, x: np.ndarray, i: int, plan: Plan, precision: str, batch: int) -> Any:
  import rsjax

  return rsjax.certify(
    jax.random.key(plan.seed),
    target.apply_fn,
    target.params,
    x[i : i + 1],
    ids=[i],
    sigma=target.sigma,
    num_classes=target.num_classes,
    n0=plan.n0,
    n=plan.measure_n,
    alpha=ALPHA,
    batch_size=batch,
    precision=precision,
  ).prediction


def resolve_batch(target: Target, plan: Plan, precision: str) -> int:
  """``plan.batch``, or (``"auto"``) the batch a run would take: on a CPU the fastest of
  the timed probe (``rsjax.engine.batch_timing``, cached with the compilation cache), on an
  accelerator the largest that fits in its memory."""
  if plan.batch != "auto":
    return int(plan.batch)
  from rsjax.engine import batch_timing
  from rsjax.engine import precision as precision_lib

  return batch_timing.choose_batch_size(
    target.apply_fn,
    target.params,
    target.input_shape,
    num=plan.target_n,
    batch_size="timed" if jax.devices()[0].platform == "cpu" else "auto",
    compute_dtype=precision_lib.compute_dtype(precision),
  ).batch


def time_certify(
  target: Target, xs: np.ndarray, plan: Plan, precision: str, *, progress: bool = False
) -> Throughput:
  """Times ``rsjax.certify`` of ``target`` on the images ``xs`` (one warm-up image, then the
  timed ones in rounds) at ``plan.measure_n`` and ``precision``."""
  from tqdm.auto import tqdm

  from rsjax.util import compile_clock

  with warnings.catch_warnings():
    # A small measured N "can never certify"; right, and irrelevant to a timing.
    warnings.filterwarnings("ignore", message=".*can never certify.*")
    batch = resolve_batch(target, plan, precision)
    machine.reset_peak_memory()
    with compile_clock() as clock:
      first = rounds.seconds(lambda: _certify(target, xs, 0, plan, precision, batch))
    run_s = max(first - clock[0], 1e-6)
    images = plan.images or int(min(MAX_AUTO_IMAGES, max(1, TIMED_BUDGET_S // run_s)))
    images = min(images, len(xs) - 1)
    bar = tqdm(desc=f"  {precision}", unit="image", disable=not progress)
    timing = rounds.time_rounds(
      lambda i: _certify(target, xs, 1 + i % images, plan, precision, batch),
      plan.n0 + plan.measure_n,
      min_calls=images,
      tick=bar.update,
    )
    bar.close()
  return Throughput(
    precision=precision,
    batch=batch,
    compile_s=clock[0],
    first_call_s=first,
    timing=timing,
    images=images,
    target_samples=plan.n0 + plan.target_n,
    peak_memory=machine.peak_memory(),
  )


def figures(run: Throughput, flops: float, elements: int, peaks: Peaks | None) -> dict[str, Any]:
  """MFU and the bound of ``run`` against ``peaks`` (None where the device has no peaks or
  no unit for the precision): ``mfu``, ``bound`` (compute and memory seconds per image at the
  target N, which one binds), ``bound_fraction`` (bound / measured time)."""
  peak = None if peaks is None else peaks.flops(run.precision)
  if peaks is None or not peak:
    return {"peak_flops": None, "mfu": None, "bound": None, "bound_fraction": None}
  key = peak_key(run.precision)
  bound = bound_seconds(
    flops, elements, key, {key: peak, "hbm": peaks.bandwidth}, run.target_samples
  )
  return {
    "peak_flops": peak,
    "mfu": flops * run.samples_per_s / peak,
    "bound": bound,
    "bound_fraction": bound["bound_s"] / run.seconds_per_image,
  }
