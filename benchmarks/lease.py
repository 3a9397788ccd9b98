"""The two Python steps of ``benchmarks/gpu_lease.sh``: the device record and the JSON merge.

``python -m benchmarks.lease env OUT`` writes ``OUT/env.json``: Python, JAX,
jaxlib, Flax, Optax, NumPy, PyTorch (its CUDA and cuDNN versions), the first
device (``str``, kind, platform, platform version, memory statistics) and, where
the installed JAX offers it, the attached topology's ``target_config`` (also as
``OUT/target_config.txtpb``: what a deviceless compile for this GPU needs).

``python -m benchmarks.lease merge OUT`` reads ``OUT/stages.jsonl`` (one line
per finished or skipped stage, written by the script) and each stage's JSON and
writes ``OUT/gpu.json``: every stage in order with its status (``ok``,
``timeout``, ``failed (rc N)``, ``skipped: ...``), its seconds and limit, its
log and its rows. It imports neither JAX nor PyTorch and runs after every
stage, so a stage that dies leaves the file as the stages before it made it.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys


def _version(module: str):
  try:
    return __import__(module).__version__
  except Exception as e:  # noqa: BLE001 - a record, whatever is missing
    return f"unavailable ({type(e).__name__})"


def _torch_info() -> dict:
  try:
    import torch
  except Exception as e:  # noqa: BLE001
    return {"torch": f"unavailable ({type(e).__name__})"}
  info = {"torch": torch.__version__, "torch_cuda": torch.version.cuda}
  info["torch_cudnn"] = torch.backends.cudnn.version() if torch.cuda.is_available() else None
  if torch.cuda.is_available():
    info["torch_device"] = torch.cuda.get_device_name()
  return info


def _topology(out: str) -> dict:
  """The attached topology's description; its ``target_config`` saved when there is one."""
  try:
    from jax.experimental import topologies

    topo = topologies.get_attached_topology()
  except Exception as e:  # noqa: BLE001 - no such API on this JAX, or no accelerator
    return {"error": f"{type(e).__name__}: {e}"[:300]}
  info = {"repr": repr(topo)[:2000]}
  config = getattr(topo, "target_config", None)
  if config is not None:
    path = os.path.join(out, "target_config.txtpb")
    with open(path, "w", encoding="utf-8") as fh:
      fh.write(str(config))
    info["target_config"] = "target_config.txtpb"
  return info


def device_record(out: str) -> dict:
  """Versions, the first device and its topology (see the module docstring)."""
  import jax

  d = jax.devices()[0]
  rec = {
    "python": platform.python_version(),
    "jax": jax.__version__,
    "jaxlib": _version("jaxlib"),
    "flax": _version("flax"),
    "optax": _version("optax"),
    "numpy": _version("numpy"),
    "backend": jax.default_backend(),
    "device": str(d),
    "device_kind": getattr(d, "device_kind", None),
    "platform": d.platform,
    "platform_version": getattr(d.client, "platform_version", None),
    "device_count": jax.device_count(),
    "xla_flags": os.environ.get("XLA_FLAGS", ""),
  }
  try:
    rec["memory_stats"] = d.memory_stats()
  except Exception:  # noqa: BLE001 - CPU devices have none
    rec["memory_stats"] = None
  rec.update(_torch_info())
  rec["topology"] = _topology(out)
  return rec


def _read_json(path: str):
  try:
    with open(path, encoding="utf-8") as fh:
      return json.load(fh)
  except (OSError, ValueError):
    return None


def merge(out: str) -> dict:
  """``OUT/gpu.json`` from ``OUT/stages.jsonl`` and the stages' JSON files."""
  stages = []
  path = os.path.join(out, "stages.jsonl")
  if os.path.exists(path):
    with open(path, encoding="utf-8") as fh:
      stages = [json.loads(line) for line in fh if line.strip()]
  for s in stages:
    if s.get("json"):
      s["data"] = _read_json(os.path.join(out, s["json"]))
  merged = {
    "written": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    "env": _read_json(os.path.join(out, "env.json")),
    "stages": stages,
  }
  with open(os.path.join(out, "gpu.json"), "w", encoding="utf-8") as fh:
    json.dump(merged, fh, indent=1)
  return merged


def main(argv=None) -> int:
  """``env OUT`` or ``merge OUT``."""
  argv = sys.argv[1:] if argv is None else argv
  if len(argv) != 2 or argv[0] not in ("env", "merge"):
    print("usage: python -m benchmarks.lease {env|merge} OUT", file=sys.stderr)
    return 2
  cmd, out = argv
  os.makedirs(out, exist_ok=True)
  if cmd == "merge":
    merged = merge(out)
    print(", ".join(f"{s['stage']}: {s['status']}" for s in merged["stages"]))
    return 0
  rec = device_record(out)
  with open(os.path.join(out, "env.json"), "w", encoding="utf-8") as fh:
    json.dump(rec, fh, indent=1, default=str)
  print(json.dumps(rec, indent=1, default=str))
  return 0


if __name__ == "__main__":
  sys.exit(main())
