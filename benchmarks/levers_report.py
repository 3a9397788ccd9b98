"""The tables of ``benchmarks.levers_cpu``'s JSON (markdown, for benchmarks/RESULTS.md)."""

from __future__ import annotations

import json

__all__ = ["tables"]


def _m(v: float) -> str:
  return f"{v / 1e6:.2f}"


def _kb(v: float) -> str:
  return f"{v / 1024:.1f}"


def tables(res: dict) -> str:
  """The JSON's figures as markdown tables."""
  out = []
  if "costs" in res:
    out += ["| model | pack | stage | MFLOP/sample | x unpacked | act. KiB/sample bf16 (f32) |",
            "|---|---|---|---|---|---|"]  # fmt: skip
    base = {
      (c["model"], r["stage"]): r for c in res["costs"] if c["pack"] == 1 for r in c["stages"]
    }
    for c in res["costs"]:
      tot = dict(c["total"], stage="total")
      base_tot = next(
        b["total"] for b in res["costs"] if b["model"] == c["model"] and b["pack"] == 1
      )
      for r in c["stages"] + [tot]:
        b = base_tot if r["stage"] == "total" else base[(c["model"], r["stage"])]
        ratio = r["flops_per_sample"] / b["flops_per_sample"] if b["flops_per_sample"] else 1.0
        by = r["activation_bytes_per_sample"]
        out.append(f"| {c['model']} | {c['pack']} | {r['stage']} | {_m(r['flops_per_sample'])} | "
                   f"{ratio:.2f} | {_kb(by['bf16'])} ({_kb(by['float32'])}) |")  # fmt: skip
    out += ["",
            "| model | pack | first stage's convolutions (kernel in->out /stride @HxW: count) |",
            "|---|---|---|"]  # fmt: skip
    for c in res["costs"]:
      convs = ", ".join(f"{k}: {n}" for k, n in c["first_stage_convs"].items())
      out.append(f"| {c['model']} | {c['pack']} | {convs} |")
    out.append("")
  if "program" in res:
    out += ["| variant | steps | while (StableHLO / CPU HLO, with trip count) | conditional "
            "(StableHLO / CPU HLO) | convs | trip counts | act. ops per conv gap | CPU compile s |",
            "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for p in res["program"]:
      s, c = p["stablehlo"], p.get("compiled_cpu") or {}
      name = f"{p['model']} bf16 pack {p['pack']}" + (" --fold-bn" if p["fold_bn"] else "")
      out.append(
        f"| {name} | {p['steps']} | {s['while']} / {c.get('while', '-')}, "
        f"{c.get('while_with_known_trip_count', '-')} | {s['conditional']} / "
        f"{c.get('conditional', '-')} | {s['convolution']} | "
        f"{sorted(set(c.get('known_trip_counts', [])))} | {s['activation_ops_per_gap']:.2f} | "
        f"{c.get('compile_s', float('nan')):.1f} |"
      )
    out += ["", "| variant | ops on activations between a convolution and the next | count |",
            "|---|---|---|"]  # fmt: skip
    for p in res["program"]:
      name = f"pack {p['pack']}" + (" --fold-bn" if p["fold_bn"] else "")
      for seq, n in p["stablehlo"]["ops_between_convs"].items():
        out.append(f"| {name} | {seq or '(none)'} | {n} |")
    out.append("")
  if "timing" in res:
    out += ["| model | N (n0) | batch | cold: compile s / first image s / certify s | "
            "warm cache: compile s / first image s / certify s | compile saved s |",
            "|---|---|---|---|---|---|"]  # fmt: skip
    for t in res["timing"]:
      c, w = t["cold"], t["warm"]
      size = f" {t['input_size']} px" if t["input_size"] else ""
      out.append(
        f"| {t['model']}{size} bf16 | {t['num']} ({t['n0']}) | {t['batch']} | "
        f"{c['compile_s']:.1f} / {c['first_call_s']:.1f} / {c['certify_s']:.2f} | "
        f"{w['compile_s']:.1f} / {w['first_call_s']:.1f} / {w['certify_s']:.2f} | "
        f"{t['compile_saved_s']:.1f} |"
      )
    out.append("")
  if "lease" in res:
    lease = res["lease"]
    out += [f"Lease dry run: rc {lease['rc']}, wall {lease['wall_s']:.0f} s, stages "
            f"{lease['stage_seconds_sum']} s.", "", "| stage | status | s | limit s |",
            "|---|---|---|---|"]  # fmt: skip
    for s in lease["stages"]:
      out.append(f"| {s['stage']} | {s['status']} | {s['seconds']} | {s['limit']} |")
    for name, t in lease["twins"].items():
      out.append(f"\n{name}: {json.dumps(t)}")
    out.append("")
  return "\n".join(out)
