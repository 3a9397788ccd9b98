"""How the benchmarks measure: the workloads, compile time, wall time, memory peaks,
FLOPs and the environment a figure was taken in.

``benchmarks.throughput`` and ``benchmarks.suite`` (and ``profile``, ``scaling``)
take their workloads and clocks from here.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import platform
import time
import warnings

try:  # PyTorch first: importing it after JAX's thread pools exist is fine, but keep it simple.
  import torch
except ImportError:  # benchmark-only extra
  torch = None

import jax  # noqa: E402
from jax import monitoring  # noqa: E402

from rsjax.bench.machine import cpu_model, reset_peak_memory, rss_peak_bytes  # noqa: E402


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

# ------------------------------------------------------------------------------------------------
# Measurement helpers
# ------------------------------------------------------------------------------------------------


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
  """The process' peak RSS in MiB (``rsjax.bench.machine.rss_peak_bytes``), else None."""
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
  """FLOPs of one forward pass per sample, from the jaxpr (``rsjax.bench.costs``): the same
  number on every backend (XLA's GPU ``cost_analysis`` leaves out cuDNN convolutions)."""
  from rsjax.bench.costs import matmul_flops

  return matmul_flops(apply_fn, params, input_shape)


def peak_gflops(dtype: str, cpu_peak: float | None) -> float | None:
  """The first device's dense peak in GFLOP/s at ``dtype`` ("float32", "bfloat16"): the
  vendor's (``rsjax.bench.peaks.PUBLISHED``), ``cpu_peak`` on a CPU, else None."""
  from rsjax.bench.peaks import published_peaks

  dev = jax.local_devices()[0]
  if dev.platform == "cpu":
    return cpu_peak
  peaks = published_peaks(dev.device_kind)
  flops = None if peaks is None else peaks.flops(dtype)
  return None if flops is None else flops / 1e9


def environment(threads) -> dict:
  env = {
    "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    "cpu": cpu_model(),
    "cores": os.cpu_count(),
    "load_avg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    "python": platform.python_version(),
    "jax": jax.__version__,
    "jaxlib": None,
    "devices": [str(d) for d in jax.local_devices()],
    "device_kind": jax.local_devices()[0].device_kind,
    "matmul_precision": str(jax.config.jax_default_matmul_precision),
    "xla_flags": os.environ.get("XLA_FLAGS", ""),
    "torch": torch.__version__ if torch is not None else None,
    "torch_threads_tried": list(threads) if torch is not None else None,
    "torch_cuda_device": (
      torch.cuda.get_device_name(0) if torch is not None and torch.cuda.is_available() else None
    ),
  }
  try:
    import jaxlib

    env["jaxlib"] = jaxlib.__version__
  except ImportError:
    pass
  try:
    import flax

    env["flax"] = flax.__version__
  except ImportError:
    pass
  return env


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
