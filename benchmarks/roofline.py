"""The roofline of the GPU suite (docs/PERFORMANCE.md): the attainable peaks of a device and
the bound, compute or memory, of a number of forward passes."""

from __future__ import annotations

import jax

# Attainable peaks (docs/PERFORMANCE.md): FLOP/s, the NVIDIA H100/H200 datasheets' dense figures
# derated (bf16 989, TF32 495, fp32 without tensor cores 67 TFLOP/s for the SXM H100), HBM B/s
# as the datasheets give it (3.35 TB/s H100 SXM, 4.8 TB/s H200 SXM). "fp32" is rsjax's
# default precision (full-precision matmuls), so its peak is the fp32 one, not TF32's.
DEVICE_PEAKS = {
  "H100": {"bf16": 800e12, "tf32": 400e12, "fp32": 60e12, "hbm": 3.35e12},
  "H200": {"bf16": 800e12, "tf32": 400e12, "fp32": 60e12, "hbm": 4.8e12},
}


def device_peaks(override: str | None = None) -> dict | None:
  """The peaks (docs/PERFORMANCE.md) of the first device, or ``override``:
  ``"bf16_tflops,fp32_tflops,hbm_tbps"`` (TF32 taken as half the bf16 peak) or
  ``"bf16_tflops,tf32_tflops,fp32_tflops,hbm_tbps"``."""
  if override:
    values = [float(v) * 1e12 for v in override.split(",")]
    if len(values) == 3:
      values.insert(1, values[0] / 2)
    bf16, tf32, fp32, hbm = values
    return {"bf16": bf16, "tf32": tf32, "fp32": fp32, "hbm": hbm}
  kind = jax.local_devices()[0].device_kind
  for name, peaks in DEVICE_PEAKS.items():
    if name in kind:
      return peaks
  return None


def bound_seconds(
  flops_per_sample: float, act_elements: int, precision: str, peaks: dict, samples: int
) -> dict:
  """The bound (docs/PERFORMANCE.md) of ``samples`` forward passes: compute, memory, their max."""
  compute = flops_per_sample * samples / peaks[precision]
  memory = 2.5 * act_elements * (2 if precision == "bf16" else 4) * samples / peaks["hbm"]
  return {
    "compute_s": compute,
    "memory_s": memory,
    "bound_s": max(compute, memory),
    "bound": "compute" if compute >= memory else "memory",
  }
