"""Where one certification's time goes: piece by piece on this device (:func:`profile`), and on
an accelerator from a ``jax.profiler`` trace (:func:`trace`).

:func:`profile` times, for one input and the engine's batch ``b``, best of ``reps`` (wall and
process CPU seconds): ``engine`` (``rsjax.sample_counts`` of ``num`` samples), ``noise`` (the
engine's noise alone, per step), ``forward`` (``apply_fn`` on ``[b, ...]``), ``count + rest``
(engine minus noise and forward), ``launch`` (one single-sample call minus a forward of one),
``host statistics`` (bound and radius of one input); and per 3x3 convolution of each CIFAR
ResNet stage, XLA in NHWC and NCHW against PyTorch at the same batch. ``noise=True`` instead
times the Gaussian noise streams alone (1,000 samples of 784 normals, one key per sample):
``jax.random.normal`` (and its RBG keys), the default stream and ``gaussian_fast``.

:func:`trace`: one warm-up image, then one under ``jax.profiler.trace``; the trace's device
events summarized: kernels per op class with their time, the device's busy time (the union of
its kernels' intervals over every stream), the span from first to last kernel and the gaps in
it, against the call's wall time. On a CPU the events are XLA's thunks (a check of the parsing);
the figures that matter come from a GPU. Writes ``out/trace_summary.json`` and the trace.
"""

from __future__ import annotations

import glob
import gzip
import json as jsonlib
import os
import shutil
import tempfile
import time

import numpy as np

try:
  import torch
except ImportError:  # benchmark-only extra
  torch = None

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import rsjax  # noqa: E402
from benchmarks import measure  # noqa: E402
from benchmarks.measure import N0, row_model  # noqa: E402
from rsjax import models, stats  # noqa: E402
from rsjax import noise as noise_lib  # noqa: E402
from rsjax.engine import batching  # noqa: E402

__all__ = ["noise_streams", "pieces", "profile", "report", "summarize", "trace"]

SIGMA = 0.25


def best_time(fn, reps: int) -> dict:
  """Best wall and process-CPU seconds of ``fn()`` over ``reps`` calls (after one warm-up)."""
  fn()
  wall, cpu = [], []
  for _ in range(reps):
    w, c = time.perf_counter(), time.process_time()
    fn()
    wall.append(time.perf_counter() - w)
    cpu.append(time.process_time() - c)
  return {"wall_s": min(wall), "cpu_s": min(cpu)}


def _sync(x):
  return jax.block_until_ready(x)


def conv_stages(batch: int, reps: int) -> list[dict]:
  """One 3x3 convolution per CIFAR ResNet stage: XLA (NHWC, NCHW) and PyTorch (NCHW)."""
  rows = []
  rng = np.random.default_rng(0)
  for ch, hw in ((16, 32), (32, 16), (64, 8)):
    x = rng.standard_normal((batch, hw, hw, ch), dtype=np.float32)
    k = rng.standard_normal((3, 3, ch, ch), dtype=np.float32)
    nhwc = jax.jit(
      lambda x, k: jax.lax.conv_general_dilated(
        x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
      )
    )
    nchw = jax.jit(
      lambda x, k: jax.lax.conv_general_dilated(
        x, k, (1, 1), "SAME", dimension_numbers=("NCHW", "OIHW", "NCHW")
      )
    )
    xj, kj = jnp.asarray(x), jnp.asarray(k)
    xc, kc = jnp.asarray(x.transpose(0, 3, 1, 2)), jnp.asarray(k.transpose(3, 2, 0, 1))
    row = {
      "channels": ch,
      "size": hw,
      "batch": batch,
      "gflop": 2 * batch * hw * hw * ch * ch * 9 / 1e9,
      "xla_nhwc": best_time(lambda f=nhwc, x=xj, k=kj: _sync(f(x, k)), reps),
      "xla_nchw": best_time(lambda f=nchw, x=xc, k=kc: _sync(f(x, k)), reps),
    }
    if torch is not None:
      xt, kt = (
        torch.from_numpy(x.transpose(0, 3, 1, 2).copy()),
        torch.from_numpy(k.transpose(3, 2, 0, 1).copy()),
      )
      with torch.no_grad():
        row["torch"] = best_time(
          lambda x=xt, k=kt: torch.nn.functional.conv2d(x, k, padding=1), reps
        )
    rows.append(row)
  return rows


def pieces(name: str, *, num: int, batch_size, reps: int, seed: int = 0) -> dict:
  """Piece-by-piece times of ``name``'s certification on the first device (see module doc)."""
  spec = measure.SPECS[name]
  model = models.create_model(
    name, num_classes=spec.num_classes, input_shape=spec.input_shape, rngs=seed
  )
  apply_fn, variables = models.to_apply_fn(model)
  x = np.random.default_rng(seed).random((1,) + spec.input_shape, dtype=np.float32)
  b = (
    batching.auto_batch_size(apply_fn, variables, spec.input_shape, num=num)
    if batch_size == "auto"
    else int(batch_size)
  )
  steps = -(-num // b)
  out = {
    "model": name,
    "num": num,
    "batch_size": b,
    "steps": steps,
    "device": jax.local_devices()[0].device_kind,
  }

  def engine(n=num, bs=b):
    return rsjax.sample_counts(
      jax.random.key(1),
      apply_fn,
      variables,
      x,
      sigma=SIGMA,
      num_classes=spec.num_classes,
      num=n,
      batch_size=bs,
    )

  gauss = noise_lib.get_noise("gaussian")
  noise_fn = jax.jit(lambda key, j: rsjax.sample_noise(gauss, key, 0, j, spec.input_shape))
  j = jnp.arange(b, dtype=jnp.uint32)
  fwd = jax.jit(apply_fn)
  xb = jnp.asarray(np.repeat(x, b, axis=0))
  x1 = jnp.asarray(x)
  counts = engine()

  t = {"engine": best_time(engine, reps)}
  per_step = {
    "noise": best_time(lambda: _sync(noise_fn(jax.random.key(2), j)), reps),
    "forward": best_time(lambda: _sync(fwd(variables, xb)), reps),
  }
  for k, v in per_step.items():
    t[k] = {kk: vv * steps for kk, vv in v.items()}
  t["count + rest"] = {
    k: max(t["engine"][k] - t["noise"][k] - t["forward"][k], 0.0) for k in ("wall_s", "cpu_s")
  }
  one = best_time(lambda: engine(1, 1), reps)
  f1 = best_time(lambda: _sync(fwd(variables, x1)), reps)
  t["launch"] = {k: max(one[k] - f1[k], 0.0) for k in one}
  top = int(np.argmax(counts[0]))
  t["host statistics"] = best_time(
    lambda: stats.gaussian_radius(stats.clopper_pearson_lower(counts[0, top], num, 0.001), SIGMA),
    reps,
  )
  out["times"] = t
  if torch is not None:
    from rsjax.app.bench import torch_models as tm

    tmod = tm.from_flax(model, spec.input_shape)
    xt = torch.from_numpy(np.array(tm.to_torch_layout(np.asarray(xb))))
    for threads in sorted({1, torch.get_num_threads()}):
      torch.set_num_threads(threads)
      with torch.no_grad():
        v = best_time(lambda: tmod(xt), reps)
      out[f"torch_forward_{threads}_threads"] = {k: vv * steps for k, vv in v.items()}
  if len(spec.input_shape) == 3 and spec.input_shape[:2] == (32, 32):
    out["conv_stages"] = conv_stages(b, reps)
  return out


def noise_streams(reps: int, samples: int = 1000, shape=(784,)) -> dict:
  """Million normals per second (wall and CPU) of each Gaussian stream, engine-shaped.

  Besides rsjax's streams, ``jax.random.normal`` behind JAX's other typed-key
  implementations (``rbg``, ``unsafe_rbg``: XLA's ``RngBitGenerator``). Each row
  also says whether the stream is batch-invariant (64 samples drawn at once equal
  the same 64 drawn 8 at a time), the property rsjax's counts rest on.
  """
  streams = {
    "jax.random.normal": (jax.random.normal, "threefry2x32"),
    "jax.random.normal, rbg key": (jax.random.normal, "rbg"),
    "jax.random.normal, unsafe_rbg key": (jax.random.normal, "unsafe_rbg"),
    "threefry20 (default)": (noise_lib.standard_normal, "threefry2x32"),
    "threefry13 (gaussian_fast)": (
      lambda k, s: noise_lib.standard_normal(k, s, stream="threefry13"),
      "threefry2x32",
    ),
  }
  out = {}
  for name, (fn, impl) in streams.items():
    f = jax.jit(
      lambda key, js, fn=fn: jax.vmap(lambda k: fn(k, shape))(
        jax.vmap(lambda j: jax.random.fold_in(key, j))(js)
      )
    )
    key = jax.random.key(0, impl=impl)
    t = best_time(lambda f=f, key=key: _sync(f(key, jnp.arange(samples, dtype=jnp.uint32))), reps)
    n = samples * int(np.prod(shape)) / 1e6
    whole = np.asarray(f(key, jnp.arange(64, dtype=jnp.uint32)))
    parts = np.concatenate(
      [np.asarray(f(key, jnp.arange(s, s + 8, dtype=jnp.uint32))) for s in range(0, 64, 8)]
    )
    out[name] = {
      "M_normals_per_wall_s": n / t["wall_s"],
      "M_normals_per_cpu_s": n / t["cpu_s"],
      "batch_invariant": bool(np.array_equal(whole, parts)),
    }
  return out


def report(out: dict) -> str:
  t = out["times"]
  total = t["engine"]["wall_s"]
  lines = [
    f"# {out['model']}: N = {out['num']}, batch {out['batch_size']} ({out['steps']} steps), "
    f"{out['device']}",
    "| piece | wall s | share of engine | CPU s |",
    "|---|---|---|---|",
  ]
  for k, v in t.items():
    lines.append(f"| {k} | {v['wall_s']:.3f} | {v['wall_s'] / total:.0%} | {v['cpu_s']:.3f} |")
  for k in [k for k in out if k.startswith("torch_forward")]:
    lines.append(
      f"| PyTorch forward ({k.split('_')[2]} thr.) | {out[k]['wall_s']:.3f} | "
      f"{out[k]['wall_s'] / total:.0%} | {out[k]['cpu_s']:.3f} |"
    )
  if "conv_stages" in out:
    lines += [
      "",
      "| 3x3 conv, batch | GFLOP | XLA NHWC ms | XLA NCHW ms | PyTorch ms |",
      "|---|---|---|---|---|",
    ]
    for r in out["conv_stages"]:
      tor = r.get("torch", {}).get("wall_s")
      lines.append(
        f"| {r['channels']} ch, {r['size']}x{r['size']}, {r['batch']} | "
        f"{r['gflop']:.2f} | {r['xla_nhwc']['wall_s'] * 1e3:.1f} | "
        f"{r['xla_nchw']['wall_s'] * 1e3:.1f} | "
        f"{'-' if tor is None else f'{tor * 1e3:.1f}'} |"
      )
  return "\n".join(lines)


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
  name: str, precision: str, *, num: int, out: str, seed: int = 0, batch_size="auto", n0: int = N0
) -> dict:
  """Traces one ``rsjax.certify`` of ``name`` (after a warm-up image); returns the summary."""
  row = row_model(name, precision, num=num, batch_size=batch_size, seed=seed)
  bs = row.batch_size
  xs = np.random.default_rng(seed).random((2,) + row.spec.input_shape, dtype=np.float32)

  def certify(i):
    return row.certify(xs[i : i + 1], [i], n0=n0, num=num)

  certify(0)
  untraced, _ = measure.timed(lambda: certify(1))
  logdir = tempfile.mkdtemp()
  with jax.profiler.trace(logdir, create_perfetto_trace=True):
    t = time.perf_counter()
    certify(1)
    wall = time.perf_counter() - t
  (path,) = glob.glob(os.path.join(logdir, "plugins", "profile", "*", "perfetto_trace.json.gz"))
  with gzip.open(path, "rt", encoding="utf-8") as fh:
    summary = summarize(jsonlib.load(fh))
  os.makedirs(out, exist_ok=True)
  shutil.copy(path, os.path.join(out, "perfetto_trace.json.gz"))
  summary.update(
    model=name,
    precision=precision,
    num=num,
    n0=n0,
    batch_size=bs,
    wall_ms=wall * 1e3,
    untraced_wall_ms=untraced * 1e3,
    device=str(jax.devices()[0]),
    jax=jax.__version__,
  )
  return summary


def profile(
  *,
  model: str = "resnet110",
  num: int = 416,
  batch_size: int | str = "auto",
  reps: int = 3,
  noise: bool = False,
  json: str | None = None,
) -> dict:
  """The pieces of one certification of ``model`` (or, with ``noise``, the noise streams)."""
  if noise:
    out = noise_streams(reps)
    print(
      "| stream | M normals / wall s | M normals / CPU s | batch-invariant |\n|---|---|---|---|"
    )
    for k, v in out.items():
      inv = "yes" if v["batch_invariant"] else "NO"
      print(f"| {k} | {v['M_normals_per_wall_s']:.0f} | {v['M_normals_per_cpu_s']:.0f} | {inv} |")
  else:
    bs = batch_size if batch_size == "auto" else int(batch_size)
    out = pieces(model, num=num, batch_size=bs, reps=reps)
    print(report(out))
  measure.dump_json(json, out)
  return out


def trace(
  *,
  model: str = "resnet110",
  precision: str = "bf16",
  num: int = 100_000,
  out: str = ".",
  batch_size: int | str = "auto",
  n0: int = N0,
) -> dict:
  """Traces one certification of ``model`` (``n0`` selection samples, ``num`` estimation
  samples); writes ``out/trace_summary.json``."""
  bs = batch_size if batch_size == "auto" else int(batch_size)
  s = trace_certify(model, precision, num=num, out=out, batch_size=bs, n0=n0)
  measure.dump_json(os.path.join(out, "trace_summary.json"), s)
  print(
    f"{model} {precision}, N = {num}, batch {s['batch_size']} ({s['source']}): "
    f"wall {s['wall_ms']:.1f} ms (untraced {s['untraced_wall_ms']:.1f}), "
    f"{s['kernels']} kernels, busy {s['busy_ms']:.1f} ms, span {s['span_ms']:.1f} ms, "
    f"gaps {s['gap_ms']:.1f} ms"
  )
  for cls, c in s["by_class"].items():
    print(f"  {cls:12s} {c['kernels']:7d} kernels {c['ms']:10.2f} ms")
  for k, c in s["top_kernels"].items():
    print(f"  {c['ms']:10.2f} ms {c['kernels']:6d}x {c['class']:11s} {k}")
  return s
