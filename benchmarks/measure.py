"""How the benchmarks measure, and what they share: the workloads (``SPECS``), compile time,
wall time, memory peaks, FLOPs, JSON output, the GPU suite's rows (rsjax's side of a row, its
table and its merged JSON) and the trained demo model (:func:`demo_model`, cached on disk).

The machine a figure was taken on is ``rsjax.app.bench.machine.environment()`` (one record for
every benchmark); timing of ``rsjax bench``'s own harness is in ``rsjax.app.bench``.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import time
import warnings
from typing import Any

try:  # PyTorch first: importing it after JAX's thread pools exist is fine, but keep it simple.
  import torch
except ImportError:  # benchmark-only extra
  torch = None

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax import monitoring  # noqa: E402

import rsjax  # noqa: E402
from rsjax import data, models, training  # noqa: E402
from rsjax.app.bench.machine import environment, reset_peak_memory, rss_peak_bytes  # noqa: E402
from rsjax.app.demo import DEFAULTS  # noqa: E402
from rsjax.engine import batching  # noqa: E402
from rsjax.records.io import atomic_write_text  # noqa: E402

__all__ = ["SPECS", "demo_model", "dump_json", "environment", "row_model", "timed"]


@dataclasses.dataclass(frozen=True)
class Spec:
  """A benchmark workload: model, input shape, classes and sample counts."""

  name: str
  input_shape: tuple[int, ...]
  num_classes: int
  num_quick: int
  num_default: int


SPECS = {
  "mlp": Spec("mlp", (28, 28, 1), 10, 20_000, 100_000),
  "cnn": Spec("cnn", (28, 28, 1), 10, 4_000, 20_000),
  "lenet": Spec("lenet", (28, 28, 1), 10, 10_000, 100_000),
  "resnet20": Spec("resnet20", (32, 32, 3), 10, 1_200, 6_000),
  "resnet110": Spec("resnet110", (32, 32, 3), 10, 200, 1_000),
  "resnet50": Spec("resnet50", (224, 224, 3), 1000, 8, 32),
}


class CompileClock:
  """Sums JAX's compile-phase durations (trace, lowering, backend compile)."""

  _EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
  )

  def __init__(self):
    self.total = 0.0
    monitoring.register_event_duration_secs_listener(self._on_event)

  def _on_event(self, name, duration, **_):
    if name in self._EVENTS:
      self.total += duration


#: The process' peak RSS reset (Linux ``clear_refs`` 5; False when unsupported): rsjax's own.
reset_peak_rss = reset_peak_memory


def peak_rss_mb() -> float | None:
  """The process' peak RSS in MiB (``rsjax.app.bench.machine.rss_peak_bytes``), else None."""
  peak = rss_peak_bytes()
  return None if peak is None else peak / 2**20


def device_peak_mb() -> float | None:
  try:
    stats = jax.local_devices()[0].memory_stats()
  except Exception:  # noqa: BLE001
    return None
  if not stats or "peak_bytes_in_use" not in stats:
    return None
  return stats["peak_bytes_in_use"] / 2**20


def forward_flops(apply_fn, params, input_shape) -> float:
  """FLOPs of one forward pass per sample, from the jaxpr (``rsjax.app.bench.costs``): the same
  number on every backend (XLA's GPU ``cost_analysis`` leaves out cuDNN convolutions)."""
  from rsjax.app.bench.costs import matmul_flops

  return matmul_flops(apply_fn, params, input_shape)


def peak_gflops(dtype: str, cpu_peak: float | None) -> float | None:
  """The first device's dense peak in GFLOP/s at ``dtype`` ("float32", "bfloat16"): the
  vendor's (``rsjax.app.bench.peaks.PUBLISHED``), ``cpu_peak`` on a CPU, else None."""
  from rsjax.app.bench.peaks import published_peaks

  dev = jax.local_devices()[0]
  if dev.platform == "cpu":
    return cpu_peak
  peaks = published_peaks(dev.device_kind)
  flops = None if peaks is None else peaks.flops(dtype)
  return None if flops is None else flops / 1e9


def timed(fn):
  with warnings.catch_warnings():
    # A small timing N "can never certify"; the warning is right and irrelevant here.
    warnings.filterwarnings("ignore", message=".*can never certify.*")
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def enable_compile_cache(path: str) -> None:
  """Keeps every compiled XLA program in ``path`` (JAX's persistent compilation
  cache), so a later process skips compilation. The environment variable
  ``JAX_COMPILATION_CACHE_DIR`` does the same for any rsjax program."""
  os.makedirs(path, exist_ok=True)
  jax.config.update("jax_compilation_cache_dir", path)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
  if "jax_persistent_cache_enable_xla_caches" in jax.config.values:  # GPU autotune results
    jax.config.update(
      "jax_persistent_cache_enable_xla_caches", "xla_gpu_per_fusion_autotune_cache_dir"
    )


def dump_json(path: str | None, obj: Any) -> None:
  """Writes ``obj`` as indented JSON to ``path`` (its folder created, the file replaced whole);
  nothing when ``path`` is None."""
  if not path:
    return
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  atomic_write_text(path, json.dumps(obj, indent=1, default=str))


# ------------------------------------------------------------------------------------------------
# The demo model: trained once per settings, kept under build/cache (git-ignored)
# ------------------------------------------------------------------------------------------------

#: Where :func:`demo_model` keeps its trained models, one directory per settings.
DEMO_CACHE = os.path.join("build", "cache", "demo")


@dataclasses.dataclass(frozen=True)
class Demo:
  """A trained demo classifier: its model directory (``rsjax certify DIRECTORY`` takes it), the
  model, its forward, the test split (inputs shaped as it takes them) and its clean accuracy."""

  directory: str
  model: Any
  apply_fn: Any
  params: Any
  x_test: np.ndarray
  y_test: np.ndarray
  clean_accuracy: float


def cifar_shaped(x: np.ndarray) -> np.ndarray:
  """28x28x1 digits -> 32x32x3: zero-padded by 2 pixels, repeated over 3 channels."""
  return np.repeat(np.pad(x, ((0, 0), (2, 2), (2, 2), (0, 0))), 3, axis=-1)


def demo_model(
  sigma: float = 0.25,
  *,
  epochs: int = DEFAULTS["epochs"],
  lr: float = DEFAULTS["lr"],
  lr_step: int = DEFAULTS["lr_step"],
  batch_size: int = DEFAULTS["batch_size"],
  model: str = DEFAULTS["model"],
  shape32: bool = False,
  seed: int = 0,
  cache: str = DEMO_CACHE,
) -> Demo:
  """The demo's classifier (``rsjax.app.demo.DEFAULTS``: LeNet on the bundled ``mnist5k``
  digits, Gaussian noise at ``sigma``, lr 0.05 stepped every 8 epochs, batch 128, 20 epochs),
  trained once and kept in ``cache/<settings>`` (``rsjax.training.train``'s workdir: a later
  call, in any process, loads it; an unfinished one resumes). ``shape32``: the CIFAR-shaped
  stand-in (:func:`cifar_shaped` digits, CIFAR-10 normalization)."""
  train, test = data.load("mnist5k", "train"), data.load("mnist5k", "test")
  (x, y), (xt, yt) = train.arrays(), test.arrays()
  if shape32:
    x, xt = cifar_shaped(x), cifar_shaped(xt)
  shape = tuple(x.shape[1:])
  dataset = "mnist5k-32x32x3" if shape32 else "mnist5k"
  key = f"{model}_{dataset}_sigma{sigma:g}_e{epochs}_lr{lr:g}_step{lr_step}_b{batch_size}_s{seed}"
  directory = os.path.join(cache, key)
  normalize = "cifar10" if shape32 else "auto"
  net = models.create_model(
    model, num_classes=10, input_shape=shape, rngs=seed, normalize=normalize
  )
  config = {"model": model, "num_classes": 10, "input_shape": list(shape), "dataset": dataset}
  cfg = training.TrainConfig(
    sigma=sigma, epochs=epochs, batch_size=batch_size, lr=lr, lr_step=lr_step
  )
  net, history = training.train(
    jax.random.key(seed), net, (x, y), cfg, eval_data=(xt, yt), workdir=directory,
    model_config=config, progress=False,
  )  # fmt: skip
  apply_fn, params = models.to_apply_fn(net)
  clean = history[-1]["clean_acc"] if history else float("nan")
  return Demo(directory, net, apply_fn, params, xt, yt, float(clean))


# ------------------------------------------------------------------------------------------------
# The GPU suite's rows (``benchmarks.suite``)
# ------------------------------------------------------------------------------------------------

N0 = 100
ALPHA = 0.001
SIGMA = 0.25
# The suite's precision names -> rsjax's declared precision (``rsjax.engine.precision``); the twin
# computes the same way (TF32 off for fp32, on for tf32, bf16 autocast).
PRECISIONS = {"fp32": "float32", "tf32": "tf32", "bf16": "bfloat16"}


@dataclasses.dataclass(frozen=True)
class RowModel:
  """rsjax's side of a suite row: the model, its forward, the engine's batch and precision."""

  spec: Spec
  model: Any
  apply_fn: Any
  variables: Any
  batch_size: int
  precision: str  # rsjax's declared precision (``rsjax.engine.precision``)
  seed: int
  pack: int = 1  # samples per packed row of the narrow stage (1: not packed)

  def certify(self, x: np.ndarray, ids, *, n0: int, num: int, **options: Any):
    """``rsjax.certify`` of ``x`` ``[b, *input_shape]`` at the suite's sigma and alpha."""
    return rsjax.certify(
      jax.random.key(self.seed),
      self.apply_fn,
      self.variables,
      x,
      ids=ids,
      sigma=SIGMA,
      num_classes=self.spec.num_classes,
      n0=n0,
      n=num,
      alpha=ALPHA,
      batch_size=self.batch_size,
      precision=self.precision,
      **options,
    )


def row_model(
  name: str,
  precision: str,
  *,
  num: int,
  batch_size,
  seed: int = 0,
  fold_bn: bool = False,
  pack: int = 1,
  input_size: int | None = None,
  log=print,
) -> RowModel:
  """Builds ``name`` (seeded) at the suite's ``precision`` and picks the engine's batch.

  ``fold_bn``: rsjax certifies the model with eval-mode batch norm folded into the
  convolutions (the same function up to rounding, one memory pass fewer per conv);
  ``pack``: with its narrow stage packed ``pack`` samples a row
  (``rsjax.models.pack_narrow_stage``; a model without one runs unpacked, ``RowModel.pack``
  1, and says so). ``RowModel.model`` stays as built (the twin runs it as it is).
  ``input_size``: square inputs of that many pixels instead of the model's usual size (a
  small ResNet-50 for a CPU check).
  """
  spec = SPECS[name]
  if input_size:
    spec = dataclasses.replace(spec, input_shape=(input_size, input_size) + spec.input_shape[2:])
  declared = PRECISIONS[precision]
  model = models.create_model(
    name, num_classes=spec.num_classes, input_shape=spec.input_shape, rngs=seed
  )
  certified = models.fold_batch_norm(model)[0] if fold_bn else model
  try:
    certified = models.pack_narrow_stage(certified, pack)
  except ValueError as e:
    log(f"  pack {pack}: {e}; {name} runs unpacked")
    pack = 1
  apply_fn, variables = models.to_apply_fn(certified)
  if batch_size == "auto":
    bs = batching.auto_batch_size(
      apply_fn,
      variables,
      spec.input_shape,
      num=num,
      compute_dtype=rsjax.engine.precision.compute_dtype(declared),
    )
  else:
    bs = int(batch_size)
  return RowModel(spec, model, apply_fn, variables, bs, declared, seed, pack)


def table(results: list[dict]) -> str:
  """Markdown table of a suite run."""
  head = (
    "| model | precision | N | batch | rsjax s/image (p50) | rsjax samples/s | twin s/image "
    "| ratio to twin | compiled twin s/image (mode) | ratio to compiled twin "
    "| compile s (rsjax / twin / compiled twin) | peak MB (rsjax / twin) | MFU | bound s "
    "| fraction of bound |"
  )
  rows = [head, "|" + "---|" * (head.count("|") - 1)]

  def f(v, s="{:.3g}"):
    return "-" if v is None else s.format(v)

  for r in results:
    if "task" in r:
      continue
    rs, tw, twc = r["rsjax"], r.get("twin", {}), r.get("twin_compiled") or {}
    rows.append(
      f"| {r['model']} | {r['precision']} | {r['num']} | {r['batch_size']} "
      f"| {f(rs['seconds_per_image'])} ({f(rs['seconds_per_image_p50'])}) "
      f"| {f(rs['samples_per_s'], '{:.0f}')} | {f(tw.get('seconds_per_image'))} "
      f"| {f(r.get('ratio_to_twin'), '{:.2f}')} "
      f"| {f(twc.get('seconds_per_image'))} ({twc.get('mode', '-')}) "
      f"| {f(r.get('ratio_to_twin_compiled'), '{:.2f}')} "
      f"| {f(rs['compile_s'], '{:.1f}')} / {f(tw.get('compile_s'), '{:.1f}')} "
      f"/ {f(twc.get('compile_s'), '{:.1f}')} "
      f"| {f(rs['peak_memory_mb'], '{:.0f}')} / {f(tw.get('peak_memory_mb'), '{:.0f}')} "
      f"| {f(r['mfu'], '{:.3f}')} | {f((r['bound'] or {}).get('bound_s'))} "
      f"| {f(r['bound_fraction'], '{:.2f}')} |"
    )
  return "\n".join(rows)


def write_json(path: str, env: dict, results: list[dict]) -> None:
  """Merges ``results`` into the JSON at ``path`` (one entry per model and precision)."""
  old = []
  if os.path.exists(path):
    with open(path, encoding="utf-8") as fh:
      old = json.load(fh).get("results", [])
  key = lambda r: (r["model"], r["precision"], r.get("task", "image"))  # noqa: E731
  keys = {key(r) for r in results}
  merged = [r for r in old if key(r) not in keys]
  merged += [dict(r, environment=env) for r in results]
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  with open(path, "w", encoding="utf-8") as fh:
    json.dump(
      {
        "written": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "results": merged,
      },
      fh,
      indent=1,
    )
