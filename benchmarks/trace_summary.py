"""Where the time of one certification goes on the device, from a ``jax.profiler`` trace.

Certifies one warm-up image (compiles), then one image under
``jax.profiler.trace(create_perfetto_trace=True)``, and summarizes the trace's
device events: kernels (launches) per op class (convolution, matrix product,
elementwise fusion, reduction, random bits, copy, other) with their summed
time, the device's busy time (the union of its kernels' intervals over every
stream), the span from its first to its last kernel and the gaps in it (device
idle inside the span: launch and host waits), against the wall time of the call.

On a CPU the "device" events are XLA's thunks on its worker threads (a check of
the parsing; the figures that matter come from a GPU).

Command::

  python -m benchmarks.trace_summary --model resnet110 --precision bf16 --num 100000 --out DIR

writes ``DIR/trace_summary.json`` and ``DIR/perfetto_trace.json.gz``.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import shutil
import tempfile
import time

import jax
import numpy as np

from benchmarks import measure
from benchmarks.suite_rows import N0, PRECISIONS, row_model

#: Op classes, first match wins, by substrings of the kernel name or its HLO op (lower case).
CLASSES = (
  ("convolution", ("conv", "fprop", "dgrad", "wgrad", "cudnn", "implicit_gemm")),
  ("matmul", ("gemm", "cublas", "nvjet", "matmul", "dot", "cutlass", "xmma", "gmma")),
  ("random", ("threefry", "rng", "random", "philox")),
  ("reduction", ("reduce", "argmax", "scatter", "sort")),
  ("copy", ("memcpy", "memset", "copy", "transpose")),
  ("fusion", ("fusion", "loop_", "input_", "kernel")),
)


def op_class(name: str, hlo_op: str = "") -> str:
  """The class of a kernel by its name and HLO op (see ``CLASSES``; else ``"other"``)."""
  text = f"{name} {hlo_op}".lower()
  for cls, keys in CLASSES:
    if any(k in text for k in keys):
      return cls
  return "other"


def _union_length(intervals: list[tuple[float, float]]) -> float:
  total, end = 0.0, -float("inf")
  for a, b in sorted(intervals):
    if b <= end:
      continue
    total += b - max(a, end)
    end = b
  return total


def summarize(trace: dict) -> dict:
  """Summary of a perfetto trace's device events (see module doc); times in milliseconds."""
  events = trace["traceEvents"] if isinstance(trace, dict) else trace
  procs = {
    e["pid"]: e["args"]["name"]
    for e in events
    if e.get("ph") == "M" and e.get("name") == "process_name"
  }
  threads = {
    (e["pid"], e.get("tid")): e["args"]["name"]
    for e in events
    if e.get("ph") == "M" and e.get("name") == "thread_name"
  }
  gpu = {p for p, n in procs.items() if "/device:" in n and "CPU" not in n.upper()}
  if gpu:
    dev = [e for e in events if e.get("ph") == "X" and e["pid"] in gpu]
    source = "gpu"
  else:  # XLA:CPU: the thunks run on XLA's worker threads, not on the Python thread
    dev = [
      e
      for e in events
      if e.get("ph") == "X"
      and "XLA" in threads.get((e["pid"], e.get("tid")), "")
      and "Client" not in threads.get((e["pid"], e.get("tid")), "")
      and not e["name"].startswith("ThunkExecutor")  # the container of the thunks below it
    ]
    source = "cpu threads"
  by_class: dict[str, dict] = {}
  top: dict[str, dict] = {}
  intervals = []
  for e in dev:
    dur = float(e.get("dur", 0.0)) / 1e3
    hlo = str((e.get("args") or {}).get("hlo_op", ""))
    cls = op_class(e["name"], hlo)
    c = by_class.setdefault(cls, {"kernels": 0, "ms": 0.0})
    c["kernels"] += 1
    c["ms"] += dur
    t = top.setdefault(e["name"][:80], {"class": cls, "kernels": 0, "ms": 0.0})
    t["kernels"] += 1
    t["ms"] += dur
    intervals.append((float(e["ts"]) / 1e3, float(e["ts"]) / 1e3 + dur))
  busy = _union_length(intervals)
  span = (max(b for _, b in intervals) - min(a for a, _ in intervals)) if intervals else 0.0
  return {
    "source": source,
    "kernels": len(dev),
    "kernel_ms": sum(c["ms"] for c in by_class.values()),
    "busy_ms": busy,
    "span_ms": span,
    "gap_ms": span - busy,
    "by_class": dict(sorted(by_class.items(), key=lambda kv: -kv[1]["ms"])),
    "top_kernels": dict(sorted(top.items(), key=lambda kv: -kv[1]["ms"])[:15]),
  }


def trace_certify(
  name: str, precision: str, *, num: int, out: str, seed: int = 0, batch_size="auto"
) -> dict:
  """Traces one ``rsjax.certify`` of ``name`` (after a warm-up image); returns the summary."""
  row = row_model(name, precision, num=num, batch_size=batch_size, seed=seed)
  bs = row.batch_size
  xs = np.random.default_rng(seed).random((2,) + row.spec.input_shape, dtype=np.float32)

  def certify(i):
    return row.certify(xs[i : i + 1], [i], n0=N0, num=num)

  certify(0)
  untraced, _ = measure.timed(lambda: certify(1))
  logdir = tempfile.mkdtemp()
  with jax.profiler.trace(logdir, create_perfetto_trace=True):
    t = time.perf_counter()
    certify(1)
    wall = time.perf_counter() - t
  (path,) = glob.glob(os.path.join(logdir, "plugins", "profile", "*", "perfetto_trace.json.gz"))
  with gzip.open(path, "rt", encoding="utf-8") as fh:
    summary = summarize(json.load(fh))
  os.makedirs(out, exist_ok=True)
  shutil.copy(path, os.path.join(out, "perfetto_trace.json.gz"))
  summary.update(
    model=name,
    precision=precision,
    num=num,
    n0=N0,
    batch_size=bs,
    wall_ms=wall * 1e3,
    untraced_wall_ms=untraced * 1e3,
    device=str(jax.devices()[0]),
    jax=jax.__version__,
  )
  return summary


def main(argv=None) -> dict:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--model", default="resnet110", choices=sorted(measure.SPECS))
  p.add_argument("--precision", default="bf16", choices=sorted(PRECISIONS))
  p.add_argument("--num", type=int, default=100_000)
  p.add_argument("--out", default=".")
  p.add_argument("--batch-size", default="auto", help="'auto' or an int")
  a = p.parse_args(argv)
  bs = a.batch_size if a.batch_size == "auto" else int(a.batch_size)
  s = trace_certify(a.model, a.precision, num=a.num, out=a.out, batch_size=bs)
  with open(os.path.join(a.out, "trace_summary.json"), "w", encoding="utf-8") as fh:
    json.dump(s, fh, indent=1)
  print(
    f"{a.model} {a.precision}, N = {a.num}, batch {s['batch_size']} ({s['source']}): "
    f"wall {s['wall_ms']:.1f} ms (untraced {s['untraced_wall_ms']:.1f}), "
    f"{s['kernels']} kernels, busy {s['busy_ms']:.1f} ms, span {s['span_ms']:.1f} ms, "
    f"gaps {s['gap_ms']:.1f} ms"
  )
  for cls, c in s["by_class"].items():
    print(f"  {cls:12s} {c['kernels']:7d} kernels {c['ms']:10.2f} ms")
  for k, c in s["top_kernels"].items():
    print(f"  {c['ms']:10.2f} ms {c['kernels']:6d}x {c['class']:11s} {k}")
  return s


if __name__ == "__main__":
  main()
