"""Fixed against per-sample cost of one certification: ``rsjax.certify`` at several N.

Certifies one image at each N of ``--nums`` (n0 = 100, an explicit batch), a
warm-up call per N (its compile timed apart) and ``--reps`` timed calls, then
fits ``seconds = intercept + slope x N`` by least squares on the best call of
each N. The intercept is the fixed cost of a call (launches, host waits,
the n0 pass); the slope the cost of one sample. If the slope x 100,000 is close
to the N = 100,000 time, the time is device work; if the intercept is, it is
fixed cost.

Command::

  python -m benchmarks.n_scaling --model lenet --precision bf16 --nums 1000,10000,100000 \\
    --batch-size 14288 --json lenet_scaling.json
"""

from __future__ import annotations

import argparse
import json

import jax
import numpy as np

from benchmarks import measure
from benchmarks.suite_rows import N0, PRECISIONS, row_model


def fit(nums, seconds) -> dict:
  """Least-squares ``seconds = intercept + slope x N``."""
  slope, intercept = np.polyfit(np.asarray(nums, float), np.asarray(seconds, float), 1)
  return {"intercept_ms": float(intercept) * 1e3, "slope_ns_per_sample": float(slope) * 1e9}


def run(model: str, precision: str, *, nums, reps: int, batch_size, n0: int = N0) -> dict:
  """Times ``rsjax.certify`` of one image at each N; returns the rows and the fit."""
  clock = measure.CompileClock()
  rows = []
  row = row_model(model, precision, num=max(nums), batch_size=batch_size)  # one batch for all N
  x = np.random.default_rng(0).random((1,) + row.spec.input_shape, dtype=np.float32)
  for num in nums:
    clock.total = 0.0
    first, _ = measure.timed(lambda num=num: row.certify(x, [0], n0=n0, num=num))
    times = [
      measure.timed(lambda num=num: row.certify(x, [0], n0=n0, num=num))[0] for _ in range(reps)
    ]
    rows.append(
      {
        "num": num,
        "batch_size": row.batch_size,
        "compile_s": clock.total,
        "first_call_s": first,
        "seconds": times,
        "best_s": min(times),
        "median_s": float(np.median(times)),
      }
    )
    print(
      f"{model} {precision} N = {num}: best {min(times) * 1e3:.2f} ms, "
      f"median {np.median(times) * 1e3:.2f} ms, compile {clock.total:.1f} s",
      flush=True,
    )
  out = {
    "model": model,
    "precision": precision,
    "n0": n0,
    "reps": reps,
    "device": str(jax.devices()[0]),
    "rows": rows,
  }
  if len(nums) >= 2:
    out["fit_best"] = fit(nums, [r["best_s"] for r in rows])
    out["fit_median"] = fit(nums, [r["median_s"] for r in rows])
    print(
      f"fit (best): intercept {out['fit_best']['intercept_ms']:.2f} ms, "
      f"slope {out['fit_best']['slope_ns_per_sample']:.2f} ns/sample",
      flush=True,
    )
  return out


def main(argv=None) -> dict:
  """The command line: ``--model``, ``--precision``, ``--nums``, ``--reps``, ``--batch-size``."""
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--model", default="lenet", choices=sorted(measure.SPECS))
  p.add_argument("--precision", default="bf16", choices=sorted(PRECISIONS))
  p.add_argument("--nums", default="1000,10000,100000", help="comma-separated N")
  p.add_argument("--n0", type=int, default=N0)
  p.add_argument("--reps", type=int, default=3)
  p.add_argument("--batch-size", default="auto", help="'auto' or an int (the same for every N)")
  p.add_argument("--compile-cache", default=None, help="JAX persistent compilation cache dir")
  p.add_argument("--json", default=None)
  a = p.parse_args(argv)
  if a.compile_cache:
    measure.enable_compile_cache(a.compile_cache)
  bs = a.batch_size if a.batch_size == "auto" else int(a.batch_size)
  nums = [int(v) for v in a.nums.split(",")]
  out = run(a.model, a.precision, nums=nums, reps=a.reps, batch_size=bs, n0=a.n0)
  if a.json:
    with open(a.json, "w", encoding="utf-8") as fh:
      json.dump(out, fh, indent=1)
  return out


if __name__ == "__main__":
  main()
