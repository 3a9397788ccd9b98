"""One benchmark of a loaded model: the device's peaks, the FLOPs per sample, the timing of
each precision asked, MFU and the bound, the batch sweep (the run's batch beside its best
point), the PyTorch twin (at the run's batch and at its own best one); every figure in one dict
(what ``rsjax bench --json`` writes), every timing in rounds with its spread."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from rsjax.app.bench import harness, layout, machine, probe, report, sweep
from rsjax.app.bench.costs import op_costs
from rsjax.app.bench.peaks import Peaks, published_peaks
from rsjax.app.bench.target import Target, shape_text
from rsjax.app.launch.errors import RunError

__all__ = [
  "SWEEP_CALL_S",
  "Request",
  "bench",
  "check_precisions",
  "device_peaks_now",
  "inputs",
  "layout_advice",
]

#: Seconds of one timed call of the batch sweep, at the measured samples per second.
SWEEP_CALL_S = 0.5


@dataclasses.dataclass(frozen=True)
class Request:
  """What the command asks for: precisions, Cohen et al.'s n0 and the target N, the N to
  measure at (None: chosen), ``full`` (measure at the target N), images (None: chosen), the
  batch (``"auto"``: fitted to memory), a batch sweep, real inputs from a dataset, the PyTorch
  twin (``twin``: eager and under ``torch.compile`` in ``twin_compile`` modes; it sweeps the
  batch too, to compare the best batches)."""

  precisions: tuple[str, ...] = ("float32",)
  target_n: int = 100_000
  measure_n: int | None = None
  full: bool = False
  n0: int = 100
  images: int | None = None
  batch: int | str = "auto"
  sweep: bool = False
  dataset: str | None = None
  data_dir: str | None = None
  seed: int = 0
  twin: bool = False
  twin_compile: str = "auto"


def _has_tf32(device: Any) -> bool:
  """An NVIDIA GPU of compute capability 8.0 (Ampere) or later."""
  if device.platform != "gpu" or "nvidia" not in device.device_kind.lower():
    return False
  cc = getattr(device, "compute_capability", None)
  try:
    return cc is None or float(cc) >= 8.0
  except ValueError:
    return True


def check_precisions(names: Sequence[str], device: Any | None = None) -> tuple[str, ...]:
  """The declared precisions (``rsjax.engine.precision``) of ``names``, each one the device can
  run; one line naming the first that is unknown or that it cannot."""
  from rsjax.engine import precision

  device = jax.local_devices()[0] if device is None else device
  out = []
  for name in names:
    try:
      p = precision.resolve(name)
    except ValueError:
      raise RunError(
        f"--precision: unknown precision {name!r}; choose from "
        f"{', '.join(precision.PRECISIONS)} (or fp32, bf16)"
      ) from None
    if p == "tf32" and not _has_tf32(device):
      raise RunError(
        f"--precision tf32: this device ({device.platform}: {device.device_kind}) has no "
        "TensorFloat-32 (NVIDIA Ampere or later GPUs); it would compute float32"
      )
    out.append(p)
  return tuple(dict.fromkeys(out))


def device_peaks_now() -> Peaks | None:
  """The first device's peaks: the vendor's (``PUBLISHED``), a CPU's measured by the probe,
  None for another device."""
  device = jax.local_devices()[0]
  if device.platform == "cpu":
    return probe.cpu_peaks()
  return published_peaks(device.device_kind)


def inputs(target: Target, count: int, request: Request) -> tuple[np.ndarray, str]:
  """``count`` inputs and what they are: the dataset's first test images (``--dataset``), else
  uniform random images in [0, 1] (seeded)."""
  if request.dataset is None:
    rng = np.random.default_rng(request.seed)
    x = rng.random((count, *target.input_shape), dtype=np.float32)
    return x, "uniform random images in [0, 1]"
  from rsjax.app import launch

  ds = launch.open_dataset(request.dataset, "test", request.data_dir)
  if tuple(ds.input_shape) != target.input_shape:
    raise RunError(
      f"--dataset {request.dataset}: its inputs are {shape_text(ds.input_shape)}, the model "
      f"takes {shape_text(target.input_shape)}"
    )
  x, _ = ds.get_batch(range(min(count, len(ds))))
  return np.asarray(x, np.float32), f"the first {len(x)} {ds.name} test images"


def _plan(request: Request, flops: float, peaks: Peaks | None, p: str) -> harness.Plan:
  if request.full:
    n = request.target_n
  elif request.measure_n is not None:
    n = min(request.measure_n, request.target_n)
  else:
    n = harness.choose_measure_n(
      n0=request.n0,
      target_n=request.target_n,
      flops_per_sample=flops,
      peak_flops=None if peaks is None else peaks.flops(p),
      cap=2000 if jax.local_devices()[0].platform == "cpu" else 10_000,
    )
  return harness.Plan(request.n0, request.target_n, n, request.images, request.batch, request.seed)


def bench(
  target: Target,
  request: Request,
  *,
  progress: bool = False,
  log: Callable[[str], None] = print,
) -> dict[str, Any]:
  """Times ``target`` at each precision of ``request``; returns every figure (the JSON)."""
  peaks = device_peaks_now()
  flops, elements = op_costs(target.apply_fn, target.params, target.input_shape, batch=target.pack)
  count = (request.images or harness.MAX_AUTO_IMAGES) + 1
  xs, what = inputs(target, count, request)
  runs, sweeps, best, twins = [], [], [], []
  layout_doc = None
  for p in request.precisions:
    plan = _plan(request, float(flops), peaks, p)
    log(f"{p}: certifying {what}, n0 {plan.n0}, N {plan.measure_n} ...")
    run = harness.time_certify(target, xs, plan, p, progress=progress)
    runs.append({**_run_dict(run, plan), **harness.figures(run, float(flops), elements, peaks)})
    if p == request.precisions[0]:
      layout_doc = layout_advice(target, xs, plan, run, log)
    points: list[dict[str, Any]] = []
    if request.sweep or request.twin:
      sizes = sweep.batch_sizes(run.batch, run.samples_per_s)
      samples = int(run.samples_per_s * SWEEP_CALL_S)  # about SWEEP_CALL_S per timed call
      points = sweep.sweep(
        target, xs[:1], sizes, p, samples=samples, first=run.batch, progress=progress
      )
      sweeps += points
      best.append(sweep.best_point(points, run.batch, auto=request.batch == "auto"))
    if request.twin:
      log(f"{p}: the PyTorch twin, eager and compiled ({request.twin_compile}) ...")
      twins.append(_twin(target, xs, plan, run, request, points))
  doc = {
    "model": target.describe(),
    "inputs": what,
    "flops_per_sample": float(flops),
    "activation_elements_per_sample": int(elements),
    "peaks": None if peaks is None else peaks.as_dict(),
    "n0": request.n0,
    "target_n": request.target_n,
    "alpha": harness.ALPHA,
    "results": runs,
    "sweep": sweeps,
    "sweep_best": best,
    "twin": twins,
    "layout": layout_doc,
    "machine": machine.environment(),
  }
  doc["busy"] = [{"what": w, "spread": s} for w, s in report.busy_points(doc)]
  return doc


def layout_advice(
  target: Target,
  xs: np.ndarray,
  plan: harness.Plan,
  run: harness.Throughput,
  log: Callable[[str], None] = print,
) -> dict[str, Any] | None:
  """On a CPU, a model with channels-first (NCHW) convolutions timed again with them
  channels-last (:func:`rsjax.app.bench.layout.channels_last`), as ``run`` was (its precision,
  N, batch and images); None elsewhere or without such convolutions.

  Returns:
    ``{"convs": {layout: count}, "precision", "measured_n", "images", "as_written_s",
    "channels_last_s"}``: seconds per image at the measured N of the model as written and
    channels-last (the advice of the report, whichever is faster).
  """
  if jax.local_devices()[0].platform != "cpu":
    return None
  convs = layout.conv_layouts(target.apply_fn, target.params, target.input_shape)
  if not any(name[1:2] == "C" for name in convs):
    return None
  log(f"{run.precision}: the same network with its convolutions channels-last ...")
  alt = dataclasses.replace(target, apply_fn=layout.channels_last(target.apply_fn))
  again = dataclasses.replace(plan, images=run.images)
  timed = harness.time_certify(alt, xs, again, run.precision)
  return {
    "convs": convs,
    "precision": run.precision,
    "measured_n": plan.measure_n,
    "images": run.images,
    "as_written_s": run.seconds_per_image_measured,
    "channels_last_s": timed.seconds_per_image_measured,
    "channels_last_compile_s": timed.compile_s,
  }


def twin_refusal(target: Target) -> str | None:
  """Why ``target`` has no PyTorch twin (one line), or None: PyTorch missing, a pipeline
  (denoiser, resize), a model ``from_flax`` does not translate."""
  import importlib.util

  if importlib.util.find_spec("torch") is None:
    return (
      "--twin needs PyTorch, which is not installed (pip install torch --index-url "
      "https://download.pytorch.org/whl/cpu)"
    )
  if target.model is None:
    return "--twin: a denoiser or resize pipeline has no PyTorch twin"
  from rsjax.app.bench.torch_models import has_twin

  if not has_twin(target.model):
    return (
      f"--twin: no PyTorch twin of {type(target.model).__name__} (MLP, CNN, LeNet, the "
      "ResNets and a --torch-module have one)"
    )
  return None


def _twin(
  target: Target,
  xs: np.ndarray,
  plan: harness.Plan,
  run: harness.Throughput,
  request: Request,
  points: list[dict[str, Any]],
) -> dict[str, Any]:
  """The twin timed as ``run`` was (its batch, N and images), with rsjax's speed-up over it,
  and swept over the batches of ``points`` (rsjax's sweep): each side's best batch and
  rsjax's best over the twin's."""
  from rsjax.app.bench import twin

  out = twin.time_twin(
    target.model,
    target,
    xs,
    precision=run.precision,
    n0=plan.n0,
    n=plan.measure_n,
    alpha=harness.ALPHA,
    batch=run.batch,
    images=run.images,
    compile_modes=request.twin_compile,
    seed=request.seed,
    sweep_batches=[p["batch"] for p in points],
    sweep_call_s=SWEEP_CALL_S,
  )
  mine = max(points, key=lambda p: p["samples_per_s"])
  out["rsjax_best"] = {"batch": mine["batch"], "samples_per_s": mine["samples_per_s"]}
  for form in ("eager", "compiled"):
    timed = out.get(form) or {}
    if "seconds_per_image_measured" in timed:
      timed["rsjax_speedup"] = timed["seconds_per_image_measured"] / run.seconds_per_image_measured
    if timed.get("best"):
      timed["rsjax_best_ratio"] = mine["samples_per_s"] / timed["best"]["samples_per_s"]
  return out


def _run_dict(run: harness.Throughput, plan: harness.Plan) -> dict[str, Any]:
  return {
    "precision": run.precision,
    "batch": run.batch,
    "measured_n": plan.measure_n,
    "extrapolated": plan.extrapolated,
    "images": run.images,
    "compile_s": run.compile_s,
    "first_call_s": run.first_call_s,
    "seconds_per_image_measured": run.seconds_per_image_measured,
    "seconds_measured": list(run.seconds),
    **run.timing.as_dict(),
    "seconds_per_image": run.seconds_per_image,
    "peak_memory_bytes": run.peak_memory["bytes"],
    "peak_memory_kind": run.peak_memory["kind"],
  }
