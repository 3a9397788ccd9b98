"""rsjax's side of a row of the GPU suite (``benchmarks.suite``): the model built at the
suite's precision, optionally folded or packed, and the engine's batch; and the suite's output,
its Markdown table and its JSON (merged into the file's entries of other models and
precisions)."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
from typing import Any

import jax
import numpy as np

import rsjax
from benchmarks import measure
from rsjax import models
from rsjax.engine import batching

__all__ = ["ALPHA", "N0", "PRECISIONS", "SIGMA", "RowModel", "row_model", "table", "write_json"]

N0 = 100
ALPHA = 0.001
SIGMA = 0.25
# The suite's precision names -> rsjax's declared precision (``rsjax.engine.precision``); the twin
# computes the same way (TF32 off for fp32, on for tf32, bf16 autocast).
PRECISIONS = {"fp32": "float32", "tf32": "tf32", "bf16": "bfloat16"}


@dataclasses.dataclass(frozen=True)
class RowModel:
  """rsjax's side of a suite row: the model, its forward, the engine's batch and precision."""

  spec: measure.Spec
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
  spec = measure.SPECS[name]
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
    log(f"  --pack {pack}: {e}; {name} runs unpacked")
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
