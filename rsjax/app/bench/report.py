"""What ``rsjax bench`` prints and writes: the figures of :func:`rsjax.app.bench.run.bench` as
lines of text (a small table, one row per precision; the sweep, one table per precision and the
run's batch beside its best point; the twin) and as JSON. Each timing is given as the minimum,
median and maximum of its rounds (:mod:`rsjax.app.bench.rounds`), and a warning names the timings
whose rounds are more than 20% apart."""

from __future__ import annotations

import json
import os
from typing import Any

from rsjax.app.bench.rounds import BUSY, BUSY_SPREAD

__all__ = [
  "best_line",
  "busy_points",
  "busy_warning",
  "isa_summary",
  "layout_line",
  "lines",
  "write_json",
]


def _si(value: float, unit: str) -> str:
  """``2.52e11, "FLOP/s"`` -> ``"252 GFLOP/s"``."""
  for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
    if abs(value) >= factor:
      return f"{value / factor:.3g} {prefix}{unit}"
  return f"{value:.3g} {unit}"


def isa_summary(isa: list[str] | None) -> str:
  """The CPU extensions of ``rsjax.app.bench.machine.cpu_isa`` that set the kernels, in a few
  words: ``"AVX-512, AMX"``, ``"AVX2"``, ``"NEON, SVE"``; empty where none is known."""
  have = set(isa or ())
  vector = "AVX-512" if "avx512f" in have else "AVX2" if "avx2" in have else None
  extra = [name for name, flag in (("AMX", "amx_tile"), ("NEON", "asimd"), ("SVE", "sve"))
           if flag in have]  # fmt: skip
  return ", ".join([vector] + extra if vector else extra)


def _peaks_line(doc: dict[str, Any]) -> str:
  m, peaks = doc["machine"], doc["peaks"]
  kind = "" if m["device_kind"] == m["platform"] else f" ({m['device_kind']})"
  isa = isa_summary(m.get("cpu_isa"))
  cpu = f"{m['cpu']} ({isa})" if isa else m["cpu"]
  head = f"device: {m['platform']}{kind}, {cpu}, {m['cores']} cores"
  if peaks is None:
    return f"{head}; no peaks known for this device (MFU and bound left out)"
  flops = ", ".join(
    f"{name} {_si(peaks[key], 'FLOP/s')}"
    for name, key in (("float32", "fp32"), ("tf32", "tf32"), ("bfloat16", "bf16"))
    if peaks[key]
  )
  return f"{head}\npeaks ({peaks['source']}): {flops}, memory {_si(peaks['bandwidth'], 'B/s')}"


def _n_line(doc: dict[str, Any]) -> str:
  head = f"N = {doc['target_n']:,} (n0 = {doc['n0']}, alpha {doc['alpha']}) per image"
  measured = sorted({r["measured_n"] for r in doc["results"] if r["extrapolated"]})
  if not measured:
    return f"{head}: measured in full"
  at = " and ".join(f"{n:,}" for n in measured)
  return (
    f"{head}: measured at N = {at}, extrapolated at the measured samples/s (fixed costs "
    "of a call spread over fewer samples: s/image is an upper estimate; --full runs it)"
  )


def _num(value: float) -> str:
  """3 significant digits, thousands separated: ``4430.2`` -> ``"4,430"``, ``0.0312`` ->
  ``"0.0312"``."""
  if abs(value) >= 1000:
    return f"{float(f'{value:.3g}'):,.0f}"
  return f"{value:.3g}"


def _memory(r: dict[str, Any]) -> str:
  if r["peak_memory_bytes"] is None:
    return "n/a"
  kind = "device" if r["peak_memory_kind"].startswith("device") else "RSS"
  return f"{r['peak_memory_bytes'] / 2**20:,.0f} MiB {kind}"


def _rates(r: dict[str, Any]) -> list[str]:
  """Minimum, median and maximum samples per second of a timing's rounds."""
  return [f"{r[f'samples_per_s_{k}']:,.0f}" for k in ("min", "median", "max")]


def _row(r: dict[str, Any]) -> list[str]:
  bound = r["bound"]
  return [
    r["precision"],
    str(r["batch"]),
    str(r["images"]),
    str(len(r["rounds"])),
    f"{r['compile_s']:.1f}",
    *_rates(r),
    _num(r["seconds_per_image"]),
    _memory(r),
    "n/a" if r["mfu"] is None else f"{100 * r['mfu']:.2g}%",
    "n/a" if bound is None else f"{bound['bound']} {_num(bound['bound_s'])} s",
    "n/a" if r["bound_fraction"] is None else f"{100 * r['bound_fraction']:.2g}%",
  ]


#: The columns of the table, one row per precision (:func:`_row`).
_HEADER = (
  "precision|batch|images|rounds|compile s|samples/s min|median|max|s/image|peak memory|MFU|"
  "bound s/image|of bound"
).split("|")


def _table(rows: list[list[str]]) -> list[str]:
  """``rows`` of cells as aligned lines: the first column to the left, the others right."""
  widths = [max(map(len, column)) for column in zip(*rows, strict=True)]
  return [
    "  ".join([row[0].ljust(widths[0]), *map(str.rjust, row[1:], widths[1:])]) for row in rows
  ]


def _sweep_lines(doc: dict[str, Any]) -> list[str]:
  """Per precision: the sweep's points (samples/s of the estimation pass: min, median, max of
  the rounds; the spread) and the run's batch beside the best point."""
  points, out = doc["sweep"], []
  for best in doc.get("sweep_best", []):
    p = best["precision"]
    out.append(f"batch sweep, {p} (samples/s of the estimation pass, rounds of >= 1 s):")
    rows = [
      [str(q["batch"]), *_rates(q), f"{q['spread']:.2f}x", str(len(q["rounds"]))]
      for q in points
      if q["precision"] == p
    ]
    table = _table([["batch", "samples/s min", "median", "max", "max/min", "rounds"], *rows])
    out += ["  " + row for row in table]
    out.append(best_line(best))
  return out


def best_line(best: dict[str, Any]) -> str:
  """``"batch 1000 (auto): X samples/s; best point batch 256: Y samples/s (Z% more)"``."""
  how = "auto" if best["auto"] else "--batch"
  head = f"batch {best['batch']} ({how})"
  top = f"batch {best['best_batch']}: {best['best_samples_per_s']:,.0f} samples/s"
  if best["samples_per_s"] is None:
    return f"{head}: not in the sweep (a call of it would be too long); best point {top}"
  mine = f"{head}: {best['samples_per_s']:,.0f} samples/s"
  if best["best_batch"] == best["batch"]:
    return f"{mine}, the best point of the sweep"
  return f"{mine}; best point {top} ({100 * best['gain']:.0f}% more)"


def busy_points(doc: dict[str, Any]) -> list[tuple[str, float]]:
  """The timings of ``doc`` whose rounds are more than 20% apart: ``(what, max / min)``."""
  timed = [(f"{r['precision']} certify", r) for r in doc["results"]]
  timed += [(f"sweep {q['precision']} batch {q['batch']}", q) for q in doc["sweep"]]
  for t in doc.get("twin", []):
    for form in ("eager", "compiled"):
      twin = t.get(form) or {}
      name = f"{form} twin {t['precision']}"
      timed += [(f"{name} certify", twin)] if "spread" in twin else []
      timed += [(f"{name} batch {q['batch']}", q) for q in twin.get("sweep", [])]
  return [(what, r["spread"]) for what, r in timed if r["spread"] > BUSY_SPREAD]


def busy_warning(doc: dict[str, Any]) -> list[str]:
  """The warning line of a benchmark with busy timings (:func:`busy_points`), or none."""
  busy = busy_points(doc)
  if not busy:
    return []
  which = "; ".join(f"{what} {spread:.2f}x" for what, spread in busy)
  limit = f"{100 * (BUSY_SPREAD - 1):.0f}%"
  return [f"warning: {BUSY} (rounds more than {limit} apart, max/min: {which})"]


def lines(doc: dict[str, Any]) -> list[str]:
  """The report of a benchmark as lines of text."""
  m = doc["model"]
  shape = "x".join(str(d) for d in m["input_shape"])
  denoiser = f", behind the denoiser {m['denoiser']}" if m["denoiser"] else ""
  out = [
    f"{m['name']}: {m['kind']}{denoiser}, input {shape}, {m['num_classes']} classes, "
    f"sigma {m['sigma']:g}"
    + (f", pack {m['pack']}" if m["pack"] > 1 else "")
    + (f", {m['fold_bn_pairs']} batch norms folded" if m["fold_bn_pairs"] else ""),
    _peaks_line(doc),
    f"FLOPs per sample: {_si(doc['flops_per_sample'], 'FLOP')} (2 x the multiply-adds of the "
    f"matmuls and convolutions, counted in the program); inputs: {doc['inputs']}",
    _n_line(doc),
    "",
    *_table([_HEADER, *(_row(r) for r in doc["results"])]),
  ]
  out += [f"note: {n}" for n in m["notes"]]
  out += _sweep_lines(doc)
  for t in doc.get("twin", []):
    out += [_twin_line(t), _twin_best_line(t)]
  if doc.get("layout"):
    out.append(layout_line(doc["layout"]))
  return out + busy_warning(doc)


def layout_line(advice: dict[str, Any]) -> str:
  """The advice of a model with channels-first convolutions, with both measured figures."""
  nchw = sum(k for name, k in advice["convs"].items() if name[1:2] == "C")
  written, last = advice["as_written_s"], advice["channels_last_s"]
  verdict = (
    f"NHWC is {written / last:.2f}x as fast here: build the model channels-last "
    "(flax.nnx.Conv; 'rsjax convert' ports a PyTorch checkpoint NHWC)"
    if last < written
    else "NHWC is no faster here: keep it as it is"
  )
  return (
    f"advice: {nchw} of the model's convolutions are channels-first (NCHW, as in PyTorch); "
    f"XLA on a CPU computes them channels-last. {advice['precision']}, N = "
    f"{advice['measured_n']:,}, {advice['images']} images: {_num(written)} s/image as written "
    f"(NCHW), {_num(last)} s/image with the convolutions NHWC "
    f"(rsjax.app.bench.layout.channels_last); {verdict}"
  )


def _twin_form(timed: dict[str, Any] | None, name: str) -> str:
  """``"eager 0.52 s/image at the measured N (samples/s 190 / 200 / 210), rsjax 2.10x as
  fast"``, or why the form did not run."""
  if timed is None:
    return f"{name} not timed"
  if "seconds_per_image_measured" not in timed:
    return f"{name}: no torch.compile mode ran ({'; '.join(timed['tried'].values())[:120]})"
  mode = f" ({timed['mode']}, {timed['compile_s']:.1f} s to compile)" if "mode" in timed else ""
  return (
    f"{name}{mode} {_num(timed['seconds_per_image_measured'])} s/image at the measured N "
    f"(samples/s min / median / max {' / '.join(_rates(timed))}), "
    f"rsjax {timed['rsjax_speedup']:.2f}x as fast"
  )


def _twin_line(t: dict[str, Any]) -> str:
  """One precision's twin at rsjax's batch: its logits check, the eager and the compiled twin."""
  return (
    f"PyTorch twin, {t['precision']}, at rsjax's batch {t['batch']}: "
    f"{_twin_form(t['eager'], 'eager')}; {_twin_form(t['compiled'], 'compiled')} (same "
    f"weights: logits within {t['logits']['max_abs_diff']:.1g})"
  )


def _twin_best_line(t: dict[str, Any]) -> str:
  """Each side at its own best batch of the sweep (median samples/s of the estimation pass),
  and rsjax's best over each twin's best."""
  mine = t["rsjax_best"]
  parts = [f"rsjax batch {mine['batch']} {mine['samples_per_s']:,.0f}"]
  for form in ("eager", "compiled"):
    timed = t.get(form) or {}
    if best := timed.get("best"):
      parts.append(
        f"{form} twin batch {best['batch']} {best['samples_per_s']:,.0f} "
        f"(rsjax best / twin best {timed['rsjax_best_ratio']:.2f}x)"
      )
  return (
    f"PyTorch twin, {t['precision']}, each side at its best batch (samples/s of the "
    f"estimation pass, median): {'; '.join(parts)}"
  )


def write_json(path: str, doc: dict[str, Any]) -> str:
  """Writes ``doc`` to ``path`` (its folder made), indented; returns the path."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    json.dump(doc, f, indent=2)
    f.write("\n")
  return path
