"""The output of the GPU suite (``benchmarks.suite``): its Markdown table and its JSON, merged
into the file's entries of other models and precisions."""

from __future__ import annotations

import datetime
import json
import os


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
