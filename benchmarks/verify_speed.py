"""How long ``rsjax verify`` takes on a 10,000-row certify file (no model, no device).

Writes a synthetic Cohen run (10 classes, N0 = 100, N = 100,000, alpha = 0.001,
sigma 0.25; counts drawn from a Dirichlet-multinomial, radii from
``rsjax.certificate_from_counts``) with its run and certificate records, then
times ``rsjax verify`` on it as a whole process (Python start-up and imports
included) and ``rsjax.verify.verify`` in this process::

  python -m benchmarks.verify_speed --rows 10000

The run names a dataset rsjax cannot load ("synthetic-bench"), so labels and
inputs are not checked against data (the report says so); everything else is.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np


def write_run(path: str, rows: int, seed: int = 0) -> None:
  import rsjax
  from rsjax.runs import io, record
  from rsjax.runs import spec as runspec

  rng = np.random.default_rng(seed)
  c, n0, n, alpha, sigma = 10, 100, 100_000, 0.001, 0.25
  settings = rsjax.Sampling(n0=n0, n=n, alpha=alpha)
  p = rng.dirichlet(np.full(c, 0.2), size=rows)
  c0 = np.stack([rng.multinomial(n0, q) for q in p])
  c1 = np.stack([rng.multinomial(n, q) for q in p])
  cert = rsjax.certificate_from_counts(
    c0, c1, n=n, alpha=alpha, scale=np.full(rows, sigma), dim=784
  )
  labels = rng.integers(0, c, rows)
  run = runspec.RunSpec(
    model=runspec.ModelRef(fingerprint="synthetic"),
    data=runspec.DataRef(
      name="synthetic-bench", split="test", size=rows, input_shape=(28, 28, 1), num_classes=c
    ),
    sigma=sigma,
    sampling=record.sampling_fields(settings),
    versions=record.versions(),
  )
  x = np.zeros((28, 28, 1), np.float32)
  with (
    io.ResultsWriter(path, kind="certify", resume=False, run=run) as w,
    record.RecordWriter(path) as rec,
  ):
    for i in range(rows):
      rec.write(i, record.row(cert, i, x, n=n))
      w.write(idx=i, label=labels[i], predict=cert.prediction[i], radius=cert.radius[i])


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--rows", type=int, default=10_000)
  args = parser.parse_args()
  from rsjax import verify

  with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "run.tsv")
    write_run(path, args.rows)
    t0 = time.perf_counter()
    proc = subprocess.run(
      [sys.executable, "-m", "rsjax.cli", "verify", path],
      capture_output=True,
      text=True,
      check=False,
    )
    wall = time.perf_counter() - t0
    t0 = time.perf_counter()
    report = verify.verify(path)
    dt = time.perf_counter() - t0
  print(
    f"rows {report.rows}: 'rsjax verify' {wall:.2f} s wall (start-up included, exit "
    f"{proc.returncode}); verify.verify {dt:.2f} s in process; all match: {report.ok}"
  )


if __name__ == "__main__":
  main()
