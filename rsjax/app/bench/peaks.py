"""The peaks of a device and the bound of a certification (docs/PERFORMANCE.md).

Two tables. :data:`PUBLISHED` holds the vendors' figures (dense FLOP/s per precision, memory
bandwidth), against which ``rsjax bench`` states MFU and the bound; :data:`DEVICE_PEAKS` holds
the GPU suite's attainable peaks (``benchmarks.suite``: the H100/H200 datasheet figures derated,
docs/PERFORMANCE.md). A CPU has no table: ``rsjax.app.bench.probe`` measures it.

The bound of ``S`` forward passes of a model of ``F`` FLOPs and ``A`` output elements per
sample (:func:`bound_seconds`): ``max(F S / peak[precision], 2.5 A bytes S / bandwidth)``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

__all__ = [
  "DEVICE_PEAKS",
  "PUBLISHED",
  "Peaks",
  "bound_seconds",
  "device_peaks",
  "peak_key",
  "published_peaks",
]

# Attainable peaks of the GPU suite (docs/PERFORMANCE.md): FLOP/s, the NVIDIA H100/H200
# datasheets' dense figures derated (bf16 989, TF32 495, fp32 without tensor cores 67 TFLOP/s for
# the SXM H100), HBM B/s as the datasheets give it (3.35 TB/s H100 SXM, 4.8 TB/s H200 SXM). "fp32"
# is rsjax's default precision (full-precision matmuls), so its peak is the fp32 one, not TF32's.
DEVICE_PEAKS = {
  "H100": {"bf16": 800e12, "tf32": 400e12, "fp32": 60e12, "hbm": 3.35e12},
  "H200": {"bf16": 800e12, "tf32": 400e12, "fp32": 60e12, "hbm": 4.8e12},
}


@dataclasses.dataclass(frozen=True)
class Peaks:
  """The peaks of one device: FLOP/s per precision (None: the device has no such unit or no
  figure is published) and memory bandwidth in B/s, with where they come from."""

  name: str
  fp32: float | None
  tf32: float | None
  bf16: float | None
  bandwidth: float
  source: str

  def flops(self, precision: str) -> float | None:
    """The FLOP/s of ``precision`` (``float32``, ``tf32``, ``bfloat16`` or the short names)."""
    return getattr(self, peak_key(precision))

  def as_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


# The vendors' figures, dense (NVIDIA quotes tensor-core rates "with sparsity", twice the dense
# rate: halved here), SXM parts:
#   NVIDIA H100 Tensor Core GPU datasheet (H100 SXM): BF16 1,979 / TF32 989 TFLOP/s with
#     sparsity, FP32 67 TFLOP/s, HBM3 3.35 TB/s.
#   NVIDIA H200 Tensor Core GPU datasheet (H200 SXM): the H100's compute, HBM3e 4.8 TB/s.
#   NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM): BF16 624 / TF32 312 TFLOP/s with
#     sparsity, FP32 19.5 TFLOP/s, HBM2e 2,039 GB/s.
#   Google Cloud TPU documentation, system architecture of TPU v4, v5e and v5p (per chip):
#     v4 275 TFLOP/s bf16, HBM 1,200 GB/s; v5e 197 TFLOP/s bf16, HBM 819 GB/s; v5p 459 TFLOP/s
#     bf16, HBM 2,765 GB/s. No float32 matmul peak is published for a TPU: XLA computes a float32
#     matmul at precision "highest" (rsjax's float32) as 6 bf16 passes, so the fp32 figure
#     below is bf16 / 6, derived, not published. TPUs have no TF32.
_T = 1e12
#: Published peak FLOP/s and memory bandwidth of known devices, by name (see above).
PUBLISHED: dict[str, Peaks] = {
  "H100": Peaks("H100 SXM", 67 * _T, 494.5 * _T, 989.5 * _T, 3.35e12, "NVIDIA H100 datasheet"),
  "H200": Peaks("H200 SXM", 67 * _T, 494.5 * _T, 989.5 * _T, 4.8e12, "NVIDIA H200 datasheet"),
  "A100": Peaks("A100 SXM 80GB", 19.5 * _T, 156 * _T, 312 * _T, 2.039e12, "NVIDIA A100 datasheet"),
  "TPU v4": Peaks("TPU v4", 275 * _T / 6, None, 275 * _T, 1.2e12, "Google Cloud TPU v4 docs"),
  "TPU v5e": Peaks("TPU v5e", 197 * _T / 6, None, 197 * _T, 0.819e12, "Google Cloud TPU v5e docs"),
  "TPU v5p": Peaks("TPU v5p", 459 * _T / 6, None, 459 * _T, 2.765e12, "Google Cloud TPU v5p docs"),
}

# ``device_kind`` as JAX reports it -> the entry of :data:`PUBLISHED`, the first match winning:
# each name of the table itself, then "TPU v5 lite" (a v5e) and a plain "TPU v5" (a v5p).
_KINDS = (*((name, name) for name in PUBLISHED), ("TPU v5 lite", "TPU v5e"), ("TPU v5", "TPU v5p"))

_KEYS = {"float32": "fp32", "fp32": "fp32", "tf32": "tf32", "bfloat16": "bf16", "bf16": "bf16"}


def peak_key(precision: str) -> str:
  """The key of a precision in the peaks tables: ``fp32``, ``tf32`` or ``bf16``."""
  try:
    return _KEYS[precision]
  except KeyError:
    raise ValueError(f"no peak for precision {precision!r}; one of {sorted(_KEYS)}") from None


def published_peaks(device_kind: str) -> Peaks | None:
  """The vendor's peaks of a device (its ``device_kind``), or None for a device not in
  :data:`PUBLISHED` (a CPU among them: ``rsjax.app.bench.probe.cpu_peaks`` measures one)."""
  kind = device_kind.lower()
  return next((PUBLISHED[name] for pattern, name in _KINDS if pattern.lower() in kind), None)


def device_peaks(override: str | None = None) -> dict[str, float] | None:
  """The suite's peaks (:data:`DEVICE_PEAKS`) of the first device, or ``override``:
  ``"bf16_tflops,fp32_tflops,hbm_tbps"`` (TF32 taken as half the bf16 peak) or
  ``"bf16_tflops,tf32_tflops,fp32_tflops,hbm_tbps"``."""
  if override:
    values = [float(v) * 1e12 for v in override.split(",")]
    if len(values) == 3:
      values.insert(1, values[0] / 2)
    bf16, tf32, fp32, hbm = values
    return {"bf16": bf16, "tf32": tf32, "fp32": fp32, "hbm": hbm}
  kind = jax.local_devices()[0].device_kind
  return next((peaks for name, peaks in DEVICE_PEAKS.items() if name in kind), None)


def bound_seconds(
  flops_per_sample: float, act_elements: int, precision: str, peaks: dict, samples: int
) -> dict[str, Any]:
  """The bound (docs/PERFORMANCE.md) of ``samples`` forward passes: compute, memory, their
  max. ``peaks``: FLOP/s under ``precision`` (``fp32``, ``tf32``, ``bf16``) and B/s under
  ``hbm``."""
  compute = flops_per_sample * samples / peaks[precision]
  memory = 2.5 * act_elements * (2 if precision == "bf16" else 4) * samples / peaks["hbm"]
  return {
    "compute_s": compute,
    "memory_s": memory,
    "bound_s": max(compute, memory),
    "bound": "compute" if compute >= memory else "memory",
  }
