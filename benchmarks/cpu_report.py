"""The tables of RESULTS.md's "CPU profile of the sampling loop", rendered from the JSON that
``benchmarks.cpu_profile.cpu_profile`` writes (no JAX, no PyTorch: ``tests/test_cpu_profile.py``
checks that RESULTS.md holds exactly these tables of the committed JSON).

Timings are "median (min)" in milliseconds per 1000 samples over the alternated rounds.
"""

from __future__ import annotations

__all__ = [
  "best_threads",
  "breakdown_table",
  "dtypes_table",
  "flags_table",
  "im2col_table",
  "layers_table",
  "layouts_table",
  "levers_table",
  "loop_table",
  "report",
  "table",
]

#: The main table's columns: (heading, side's key under "times" or "derived", signed).
COLUMNS = (
  ("noise", "noise", False),
  ("forward", "forward", False),
  ("count", "count", False),
  ("Σ parts", "parts", False),
  ("step", "step", False),
  ("pass", "pass", False),
  ("step − Σ", "step - parts", True),
  ("pass − step", "pass - step", True),
)
CLASSES = ("noise", "conv", "dense", "pool", "count", "loop/copy", "other")
RUNTIMES = ("YNNPACK", "XLA runtime kernel", "XLA codegen", "loop")


def _mm(t: dict) -> str:
  return f"{t['median']:.1f} ({t['min']:.1f})"


def _rows(head: list[str], rows: list[list[str]]) -> str:
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def best_threads(sides: dict, kind: str) -> str | None:
  """The key (``kind@threads``) of the twin's thread count with the lowest median pass."""
  keys = [k for k in sides if k.startswith(kind + "@")]
  return min(keys, key=lambda k: sides[k]["times"]["pass"]["median"]) if keys else None


def table(doc: dict) -> str:
  """Per model and batch, rsjax and the twins (each at its faster thread count); ``/ compiled``:
  the pass's median over the compiled twin's."""
  head = ["model", "batch", "side", *(c[0] for c in COLUMNS), "/ compiled"]
  rows = []
  for name, m in doc.get("models", {}).items():
    for b, row in m["batches"].items():
      sides = row["sides"]
      keys = ["rsjax", best_threads(sides, "eager"), best_threads(sides, "compiled")]
      ref = keys[2] and sides[keys[2]]["times"]["pass"]["median"]
      for key in filter(None, keys):
        s = sides[key]
        label = "rsjax" if key == "rsjax" else f"{key.split('@')[0]} twin, {key.split('@')[1]} thr"
        cells = []
        for _, k, signed in COLUMNS:
          t = s["times"].get(k)
          v = t["median"] if t else s["derived"][k]
          cells.append(_mm(t) if t else f"{v:+.1f}" if signed else f"{v:.1f}")
        ratio = f"{s['times']['pass']['median'] / ref:.2f}" if ref else "-"
        rows.append([name, b, label, *cells, ratio])
  return _rows(head, rows)


def loop_table(doc: dict) -> str:
  """rsjax's noise streams and its loop: the pass's slope per step (per 1000) and its intercept
  (ms a call), the host's ms a call (pass less the compiled loop called directly)."""
  head = ["model", "batch", "steps", "noise threefry20", "noise threefry13", "step",
          "loop step", "pass", "fixed ms / call", "host ms / call"]  # fmt: skip
  rows = []
  for name, m in doc.get("models", {}).items():
    for b, row in m["batches"].items():
      t, d = row["sides"]["rsjax"]["times"], row["sides"]["rsjax"]["derived"]
      rows.append([name, b, str(row["steps"]), _mm(t["noise"]), _mm(t["noise_fast"]),
                   _mm(t["step"]), f"{d['loop step']:.1f}", _mm(t["pass"]),
                   f"{d['fixed ms']:.1f}", f"{d['host ms']:.1f}"])  # fmt: skip
  return _rows(head, rows)


def breakdown_table(doc: dict) -> str:
  """XLA:CPU's traced span of each program (ms per 1000 samples; each thunk from its start to the
  next's) and each class's and each runtime's share of it (percent)."""
  head = ["model", "batch", "program", "traced ms", *CLASSES, *RUNTIMES]
  rows = []
  for name, m in doc.get("models", {}).items():
    b = m.get("xla_breakdown")
    if not b:
      continue
    for program, p in b.items():
      if program == "batch":
        continue
      total = p["traced_wall_ms_per_1000"] or 1.0
      cls = [f"{100 * p['share'][c]:.0f}" for c in CLASSES]
      run = [f"{100 * p['by_runtime'].get(r, 0.0) / total:.0f}" for r in RUNTIMES]
      rows.append([name, str(b["batch"]), program, f"{total:.1f}", *cls, *run])
  return _rows(head, rows)


def layers_table(doc: dict) -> str:
  """LeNet cut at its layers: each piece alone, rsjax against the eager twin."""
  lay = doc["layers"]
  t = lay["times"]
  rows = []
  for piece in ("conv1", "pool1", "conv2", "pool2", "dense", "forward"):
    r, p = t[f"rsjax {piece}"], t.get(f"torch {piece}")
    ratio = f"{r['median'] / p['median']:.2f}" if p else "-"
    rows.append([piece, _mm(r), _mm(p) if p else "-", ratio])
  sums = lay["sum_of_medians"]
  rows.append(["sum of the five pieces", f"{sums['rsjax sum of layers']:.1f}",
               f"{sums.get('torch sum of layers', float('nan')):.1f}", "-"])  # fmt: skip
  head = ["LeNet piece", "rsjax", f"eager twin, {lay['torch_threads']} thr", "rsjax / twin"]
  return _rows(head, rows)


def flags_table(doc: dict) -> str:
  """Each XLA flag variant's forward per model, against the default's median, with what the
  compiled program holds (YNNPACK fusions, bare convolutions) and how far its logits moved."""
  v = doc["flags"]["variants"]
  models = [k for k, r in v["default"].items() if isinstance(r, dict) and "median" in r]
  head = ["variant", "XLA_FLAGS or prefix"]
  for m in models:
    head += [m, "/ default", "YNN fusions, bare convs", "max Δ logit"]
  rows = []
  for name, r in v.items():
    if "error" in r:
      rows.append([name, r["flags"], r["error"], *[""] * (4 * len(models) - 1)])
      continue
    cells = [name, f"`{r['flags'] or r['prefix'] or '(none)'}`"]
    for m in models:
      base = v["default"][m]["median"]
      prog = r.get("program", {}).get(m)
      held = f"{prog['ynn_fusion']}, {prog['bare convolutions']}" if prog else "-"
      cells += [_mm(r[m]), f"{r[m]['median'] / base:.2f}", held, f"{r[m]['max_abs_diff']:.1e}"]
    rows.append(cells)
  return _rows(head, rows)


def layouts_table(doc: dict) -> str:
  """The same convolutions in NHWC and NCHW (``jax.lax``) and in PyTorch."""
  arms = ("xla_nhwc", "xla_nchw", "torch_channels_last", "torch_nchw")
  rows = [
    [label, f"{c['gflop']:.3f}", *(_mm(c[a]) if a in c else "-" for a in arms)]
    for label, c in doc["layouts"]["convs"].items()
  ]
  head = ["convolution, batch " + str(doc["layouts"]["batch"]), "GFLOP", "XLA NHWC", "XLA NCHW",
          "PyTorch channels-last", "PyTorch NCHW"]  # fmt: skip
  return _rows(head, rows)


def im2col_table(doc: dict) -> str:
  """LeNet's second convolution as ``lax.conv`` and as im2col + dot, alone and in the forward."""
  i = doc["im2col"]
  rows = [
    [k, _mm(i[k])]
    for k in ("conv2_lax", "conv2_im2col", "conv2_torch", "forward_lax", "forward_im2col")
    if k in i
  ]
  return _rows([f"LeNet, batch {i['batch']}", "ms per 1000"], rows)


def dtypes_table(doc: dict) -> str:
  """Each model's forward in float32 and bfloat16, and the argmax classes that differ."""
  d = doc["dtypes"]
  rows = [
    [m, _mm(r["float32"]), _mm(r["bfloat16"]),
     f"{r['bfloat16']['median'] / r['float32']['median']:.2f}", str(r["argmax_differs"])]
    for m, r in d["models"].items()
  ]  # fmt: skip
  head = ["model, batch " + str(d["batch"]), "float32", "bfloat16", "bf16 / f32", "argmax differs"]
  return _rows(head, rows)


def levers_table(doc: dict) -> str:
  """The ResNets' forward as built, folded and packed: median (min), against as built, what
  the program holds and how far the logits moved."""
  lv = doc["levers"]
  rows = []
  for m, arms in lv["models"].items():
    base = next(iter(arms.values()))["median"]
    for label, a in arms.items():
      rows.append([m, label, _mm(a), f"{a['median'] / base:.2f}", str(a["ynn_fusion"]),
                   str(a["bare convolutions"]), f"{a['max_rel_diff']:.1e}"])  # fmt: skip
  head = ["model, batch " + str(lv["batch"]), "lever", "forward", "/ as built", "YNN fusions",
          "bare convs", "max Δ logit, relative"]  # fmt: skip
  return _rows(head, rows)


#: (title, renderer, the JSON's section it needs): every table of the report.
TABLES = (
  ("sampling loop, rsjax and the twins", table, "models"),
  ("rsjax's noise streams, loop and host", loop_table, "models"),
  ("XLA:CPU by kind of work (percent of the traced span)", breakdown_table, "models"),
  ("LeNet's layers", layers_table, "layers"),
  ("XLA_FLAGS", flags_table, "flags"),
  ("NHWC and NCHW", layouts_table, "layouts"),
  ("im2col", im2col_table, "im2col"),
  ("float32 and bfloat16", dtypes_table, "dtypes"),
  ("batch norm folding and packing", levers_table, "levers"),
)


def report(doc: dict) -> str:
  """Every table the JSON has the figures for, each under its title."""
  return "\n\n".join(
    f"{title}:\n\n{fn(doc)}" for title, fn, key in TABLES if doc.get(key) and fn(doc).count("\n")
  )
