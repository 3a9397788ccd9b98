"""The machine a figure was taken on (device, CPU, versions) and the memory a run peaked at:
the device's own peak where its backend reports one (``memory_stats()``), else the process'
peak resident set size (Linux ``VmHWM``), labelled as such."""

from __future__ import annotations

import datetime
import os
import platform
import sys
from importlib import metadata
from typing import Any

import jax

__all__ = [
  "PACKAGES",
  "cpu_isa",
  "cpu_model",
  "environment",
  "peak_memory",
  "reset_peak_memory",
  "rss_peak_bytes",
]

#: The packages whose versions a figure depends on (torch only if installed).
PACKAGES = ("rsjax", "jax", "jaxlib", "flax", "optax", "numpy", "torch")


def _proc_field(path: str, name: str) -> str | None:
  """The value of the first line ``name: value`` of a ``/proc`` file, else None."""
  try:
    with open(path, encoding="utf-8") as f:
      for line in f:
        if line.startswith(name):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return None


def cpu_model() -> str:
  """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
  name = _proc_field("/proc/cpuinfo", "model name")
  return (platform.processor() or "unknown") if name is None else name


#: The CPU features that decide which kernels XLA and PyTorch run (x86: AVX-512 and AMX;
#: ARM: SVE, bf16 and int8 dot products): the same model string can hide either.
ISA_FEATURES = frozenset(
  "avx2 fma avx512f avx512bw avx512vl avx512_vnni avx512_bf16 avx512_fp16 amx_tile amx_bf16 "
  "amx_int8 asimd sve sve2 bf16 i8mm".split()
)


def cpu_isa(path: str = "/proc/cpuinfo") -> list[str] | None:
  """The CPU's vector and matrix extensions among :data:`ISA_FEATURES` (its ``flags`` or,
  on ARM, ``Features`` line), sorted; None where the file has neither (not Linux)."""
  flags = _proc_field(path, "flags") or _proc_field(path, "Features")
  return None if flags is None else sorted(set(flags.split()) & ISA_FEATURES)


def _version(package: str) -> str | None:
  try:
    return metadata.version(package)
  except metadata.PackageNotFoundError:
    if package == "rsjax":
      from rsjax import __version__

      return __version__
    return None


def _torch_cuda() -> dict[str, Any] | None:
  """PyTorch's CUDA and cuDNN versions and its device, where a process that imported torch
  (the twin's side of a comparison) has CUDA; else None."""
  torch = sys.modules.get("torch")
  if torch is None or not torch.cuda.is_available():
    return None
  cudnn = torch.backends.cudnn
  return {
    "cuda": torch.version.cuda,
    "cudnn": cudnn.version(),
    "device": torch.cuda.get_device_name(0),
    "allow_tf32": {"cudnn": cudnn.allow_tf32, "matmul": torch.backends.cuda.matmul.allow_tf32},
  }


def environment() -> dict[str, Any]:
  """The machine and the versions: date, device(s), CPU and its vector extensions, cores,
  load, Python and packages, JAX's default matmul precision and, where torch is imported and
  has CUDA, its versions."""
  device = jax.local_devices()[0]
  return {
    "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    "platform": device.platform,
    "device_kind": device.device_kind,
    "devices": len(jax.local_devices()),
    "cpu": cpu_model(),
    "cpu_isa": cpu_isa(),
    "cores": os.cpu_count(),
    "load_avg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    "os": platform.platform(),
    "python": platform.python_version(),
    "versions": {p: _version(p) for p in PACKAGES},
    "xla_flags": os.environ.get("XLA_FLAGS", ""),
    "platform_version": getattr(device.client, "platform_version", None),
    "matmul_precision": str(jax.config.values.get("jax_default_matmul_precision")),
    "torch_cuda": _torch_cuda(),
  }


def _device_peak_bytes() -> int | None:
  try:
    stats = jax.local_devices()[0].memory_stats()
  except Exception:  # noqa: BLE001 -- not every backend has memory_stats
    return None
  return int(stats["peak_bytes_in_use"]) if stats and "peak_bytes_in_use" in stats else None


def rss_peak_bytes() -> int | None:
  """The process' peak resident memory in bytes (Linux ``VmHWM``), else None."""
  peak = _proc_field("/proc/self/status", "VmHWM:")  # "1234 kB"
  return None if peak is None else int(peak.split()[0]) * 1024


def reset_peak_memory() -> bool:
  """Resets the process' peak RSS where Linux allows it (``clear_refs`` 5); False where it
  cannot. A device's peak cannot be reset (it is the peak of the process so far)."""
  try:
    with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
      f.write("5")
    return True
  except OSError:
    return False


def peak_memory() -> dict[str, Any]:
  """``{"bytes": ..., "kind": ...}``: the device's peak bytes in use (``kind`` "device peak")
  where its backend reports it, else the process' peak RSS ("process peak RSS"), else None."""
  device = _device_peak_bytes()
  if device is not None:
    return {"bytes": device, "kind": "device peak (memory_stats, process so far)"}
  rss = rss_peak_bytes()
  if rss is not None:
    return {"bytes": rss, "kind": "process peak RSS (host memory, since the last reset)"}
  return {"bytes": None, "kind": "not reported by this backend"}
