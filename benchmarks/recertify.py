"""Incremental certification (``rsjax recertify``) against certifying each child from scratch.

For each sigma: the demo's LeNet as the parent (``benchmarks.measure.demo_model``, 20 epochs),
makes its children (``bf16``: the same model directory run in bfloat16; ``int8``: weight-only
int8; ``prune``: magnitude pruning to ``sparsity``, ``prune90`` to 90%; ``tuned``: ``rsjax train --init`` of the
parent for ``tune_epochs``), and certifies the test digits in blocks of ``block`` images,
each block its own runs (so the work resumes by block, and every run stays small):

* the parent: ``rsjax certify`` (N0 100, N ``n``, alpha 0.001);
* each child recertified from that block's parent run: ``rsjax recertify`` (``n_disagree``
  disagreement samples an input at alpha_2 0.001; ``--fallback`` for the pruned and tuned);
* each child from scratch: ``rsjax certify`` as the parent.

A run left unfinished resumes where it stopped (``rsjax certify`` resumes by default). Then
``report`` reads every block's finished runs, checks each with ``rsjax verify`` and writes
the samples, seconds, disagreement and certified accuracy of each child and sigma, over the
images both its runs certified (``json``).

The paper's own baseline is also run: each child from scratch on as many samples as
``rsjax recertify`` draws (N0 100 + N ``n_disagree`` - 100, at alpha 0.002, the child's
total). The parents are the demo's (``benchmarks.measure.demo_model``, cached); RESULTS.md's
numbers come from ``benchmarks/configs/recertify.py`` (each of its runs cut into pieces of at
most 10 minutes by ``timeout 600`` and run again until it finishes).

:func:`verify_speed`: how long ``rsjax verify`` takes on a synthetic 10,000-row certify file
(10 classes, N0 100, N 100,000, alpha 0.001, sigma 0.25; counts from a Dirichlet-multinomial,
radii from ``rsjax.certificate_from_counts``) with its run and certificate records: the command
as a whole process (start-up and imports included) and ``rsjax.verify.verify`` in this process.
The run names a dataset rsjax cannot load, so labels and inputs are not checked (the report
says so); everything else is.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import types
from typing import Any

import numpy as np

from benchmarks.measure import demo_model, dump_json
from rsjax import models, verify
from rsjax.app import cli
from rsjax.records import io

__all__ = ["build_report", "recertify", "verify_speed", "write_run"]

#: Certified accuracy is reported at these radii (the done-when's grid, up to 1.0) ...
RADII = (0.0, 0.25, 0.5, 0.75, 1.0)
#: ... and its largest gap to from scratch on this finer one.
FINE = tuple(round(0.05 * k, 2) for k in range(21))
CHILDREN = ("bf16", "int8", "prune", "prune90", "tuned")
#: The children recertified with ``--fallback`` (their disagreement is not small).
FALLBACK = ("prune", "prune90", "tuned")
N0 = 100
#: The runs :func:`report` read, each verified by ``rsjax.verify``.
VERIFIED: list[str] = []


def _cli(*argv: object) -> None:
  if cli.main([str(a) for a in argv]) != 0:
    raise SystemExit(f"failed: rsjax {' '.join(map(str, argv))}")


def _parent_dir(a: Any, sigma: float) -> str:
  return demo_model(sigma, epochs=a.epochs).directory


def _child_dir(a: Any, sigma: float, name: str) -> tuple[str, tuple]:
  """``(model directory, extra flags)`` of child ``name`` of the sigma's parent."""
  parent = _parent_dir(a, sigma)
  if name == "bf16":
    return parent, ("--precision", "bfloat16")
  d = os.path.join(a.root, f"lenet_{sigma:g}_{name}")
  if os.path.isfile(os.path.join(d, "config.json")):
    return d, ()
  if name == "tuned":
    _cli("train", "--dataset", "mnist5k", "--model", "lenet", "--sigma", sigma, "--init", parent,
         "--epochs", a.tune_epochs, "--lr", a.tune_lr, "--seed", 1, "--out", d, "--quiet",
         "--overwrite")  # fmt: skip
    return d, ()
  model, config = models.load_model(parent)
  how: dict[str, object] = {"transform": name}
  if name == "int8":
    child = models.quantize_int8(model)
  elif name.startswith("prune"):  # prune: --sparsity; pruneXX: XX%
    sparsity = a.sparsity if name == "prune" else int(name[5:]) / 100
    child = models.prune_magnitude(model, sparsity)
    how = {"transform": "prune", "sparsity": sparsity}
  else:
    raise SystemExit(f"unknown child {name!r}")
  models.save_child(d, child, config, how)
  return d, ()


def _path(a: Any, sigma: float, block: int, what: str) -> str:
  return os.path.join(a.root, f"s{sigma:g}", f"b{block}", f"{what}.tsv")


def run_block(a: Any, sigma: float, block: int) -> None:
  """The block's parent run, then each child's recertify and from-scratch runs (resumed)."""
  start, stop = block * a.block, (block + 1) * a.block
  common = ("--dataset", "mnist5k", "--sigma", sigma, "--start", start, "--max", stop,
            "--N0", N0, "--batch", a.batch, "--quiet")  # fmt: skip
  rows = (*common, "--N", a.n)
  parent = _path(a, sigma, block, "parent")
  os.makedirs(os.path.dirname(parent), exist_ok=True)
  _cli("certify", _parent_dir(a, sigma), parent, *rows)
  for name in a.children:
    d, extra = _child_dir(a, sigma, name)
    fb = ("--fallback",) if name in FALLBACK else ()
    # --gamma off: RESULTS.md's figures (issue 56) predate the gamma switch
    _cli("recertify", parent, d, _path(a, sigma, block, f"{name}_re"), "--N", a.n_disagree,
         "--batch", a.batch, "--quiet", "--gamma", "off", *fb, *extra)  # fmt: skip
  for name in a.children:  # the paper's baseline: from scratch on as many samples
    d, extra = _child_dir(a, sigma, name)
    same = (*common, "--N", a.n_disagree - N0, "--alpha", 0.002)  # recertify's total alpha
    _cli("certify", d, _path(a, sigma, block, f"{name}_scratch_n"), *same, *extra)
  for name in a.children:
    d, extra = _child_dir(a, sigma, name)
    _cli("certify", d, _path(a, sigma, block, f"{name}_scratch"), *rows, *extra)


def _complete(path: str, want: int) -> bool:
  return os.path.isfile(path) and len(io.read_certify(path).idx) == want


def _runs(a: Any, sigma: float, what: str) -> list[str]:
  """The finished runs of ``what`` in block order, each checked by ``rsjax verify``."""
  out = []
  for b in range(a.max_blocks):
    p = _path(a, sigma, b, what)
    if not _complete(p, a.block):
      continue
    report = verify.verify(p)
    if not report.ok:
      raise SystemExit(f"{p} does not verify: {report.summary()}")
    VERIFIED.append(p)
    out.append(p)
  return out


def _accuracy(ok: np.ndarray, radius: np.ndarray, grid: tuple[float, ...]) -> dict:
  return {f"{r:g}": float(np.mean(ok & (radius >= r))) for r in grid}


def _side(paths: list[str]) -> dict:
  """Rows of the runs ``paths`` by input: ``{idx: (correct, radius, seconds, extra)}``."""
  rows = {}
  for p in paths:
    r = io.read_certify(p)
    for j, i in enumerate(r.idx):
      ok = bool(r.predict[j] == r.label[j] and r.predict[j] >= 0)
      rows[int(i)] = (
        ok,
        float(r.radius[j]),
        float(r.time[j]),
        {k: v[j] for k, v in r.extra.items()},
      )
  return rows


def _summary(rows: dict, ids: list[int]) -> dict:
  ok = np.array([rows[i][0] for i in ids])
  radius = np.array([rows[i][1] for i in ids])
  return {
    "seconds_per_image": float(np.mean([rows[i][2] for i in ids])),
    "accuracy": _accuracy(ok, radius, RADII),
    "fine": _accuracy(ok, radius, FINE),
  }


def cap_radius(sigma: float, n: int, alpha: float, zeta: float = 0.0) -> float:
  """The largest radius at ``n`` samples (all of the top class) at level ``alpha``, less a
  disagreement bound ``zeta``."""
  from scipy.stats import norm

  return float(sigma * norm.ppf(alpha ** (1.0 / n) - zeta))


def child_report(a: Any, sigma: float, name: str) -> dict | None:
  """One child's figures at one sigma, over the images both of its runs certified."""
  re, scratch = _side(_runs(a, sigma, f"{name}_re")), _side(_runs(a, sigma, f"{name}_scratch"))
  ids = sorted(set(re) & set(scratch))
  if not ids:
    return None
  inc, full = _summary(re, ids), _summary(scratch, ids)
  same = _side(_runs(a, sigma, f"{name}_scratch_n"))
  same_ids = sorted(set(same) & set(ids))
  fb = np.array([re[i][3].get("fallback", 0) for i in ids], float)
  samples = a.n_disagree + fb.mean() * (N0 + a.n)
  inc.update(
    samples_per_image=samples,
    forward_passes_per_image=2 * a.n_disagree + fb.mean() * (N0 + a.n),
    fallback_share=float(fb.mean()),
    # a row costs its disagreement samples, plus a from-scratch run where it fell back
    samples_max_row=a.n_disagree + float(fb.max()) * (N0 + a.n),
  )
  full.update(samples_per_image=N0 + a.n, forward_passes_per_image=N0 + a.n)
  gaps = {r: 100 * abs(inc["fine"][r] - full["fine"][r]) for r in full["fine"]}
  worst = max(gaps, key=lambda r: (gaps[r], -float(r)))
  zeta = np.array([re[i][3]["zeta"] for i in ids], float)
  return {
    "images": len(ids),
    "zeta_upper_mean": float(zeta.mean()),
    "zeta_upper_min": float(zeta.min()),
    "recertify": inc,
    "scratch": full,
    # the paper's baseline, on the images it has: from scratch on N0 + N = n_disagree samples
    "scratch_same_samples": {"images": len(same_ids), **_summary(same, same_ids)}
    if same_ids
    else None,
    "sample_ratio": (N0 + a.n) / samples,
    "forward_pass_ratio": (N0 + a.n) / inc["forward_passes_per_image"],
    "seconds_ratio": full["seconds_per_image"] / inc["seconds_per_image"],
    "at_most_scratch_plus_disagreement": inc["samples_max_row"] <= N0 + a.n + a.n_disagree,
    "max_gap_points": max(gaps[f"{r:g}"] for r in RADII),
    "max_fine_gap_points": gaps[worst],
    "max_fine_gap_radius": float(worst),
  }


def build_report(a: Any) -> dict:
  """Every sigma's parent and children (the JSON of ``json``)."""
  out: dict = {
    "settings": {k: v for k, v in vars(a).items() if k not in ("root", "report", "json")}
  }
  for sigma in a.sigmas:
    key = f"sigma={sigma:g}"
    parent = _side(_runs(a, sigma, "parent"))
    if not parent:
      continue
    ids = sorted(parent)
    out[key] = {
      "parent": {"images": len(ids), **_summary(parent, ids)},
      "cap_scratch": cap_radius(sigma, a.n, 0.001),
      "cap_recertify": cap_radius(sigma, a.n, 0.001, 1 - 0.001 ** (1 / a.n_disagree)),
      # what any sound certificate from n_disagree samples of the child reaches at most
      "cap_child_samples": cap_radius(sigma, a.n_disagree, 0.001),
      # the paper's baseline: from scratch on n_disagree samples (N0 of them to select)
      "cap_scratch_same_samples": cap_radius(sigma, a.n_disagree - N0, 0.002),
      # the recertified cap at other levels alpha_2 of the disagreement bound
      "cap_recertify_alpha2": {
        f"{a2:g}": cap_radius(sigma, a.n, 0.001, 1 - a2 ** (1 / a.n_disagree))
        for a2 in (0.01, 0.05)
      },
    }
    for name in CHILDREN:
      row = child_report(a, sigma, name)
      if row is not None:
        out[key][name] = row
  out["runs_verified"] = len(VERIFIED)
  return out


def write_run(path: str, rows: int, seed: int = 0) -> None:
  import rsjax
  from rsjax.records import io
  from rsjax.records import spec as runspec
  from rsjax.runs import record

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
    sampling=record.run_sampling(settings),
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


def recertify(
  *,
  root: str = "build/recertify",
  sigmas: tuple[float, ...] = (0.25, 0.5),
  blocks: tuple[int, ...] = (0,),
  block: int = 10,
  max_blocks: int = 40,
  children: tuple[str, ...] = CHILDREN,
  epochs: int = 20,
  n: int = 100_000,
  n_disagree: int = 20_000,
  batch: int = 5000,
  sparsity: float = 0.5,
  tune_epochs: int = 1,
  tune_lr: float = 0.01,
  report: bool = False,
  json: str = "benchmarks/results/recertify.json",
) -> dict | None:
  """Runs ``blocks`` of ``block`` images for each sigma and child (resumed; the runs under
  ``root``); with ``report``, writes ``json`` from the finished runs of ``max_blocks`` blocks."""
  bad = [c for c in children if c not in CHILDREN]
  if bad:
    raise SystemExit(f"children: unknown {bad}; choose from {CHILDREN}")
  a = types.SimpleNamespace(**{k: v for k, v in locals().items() if k != "bad"})
  if report:
    out = build_report(a)
    dump_json(json, out)
    return out
  for b in blocks:
    for sigma in sigmas:
      run_block(a, sigma, b)
      print(f"block {b} sigma {sigma:g}: done", flush=True)
  return None


def verify_speed(*, rows: int = 10_000, json: str | None = None) -> dict:
  """Times ``rsjax verify`` (the process) and ``rsjax.verify.verify`` on a ``rows`` run."""
  with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "run.tsv")
    write_run(path, rows)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "rsjax", "verify", path],
                          capture_output=True, text=True, check=False)  # fmt: skip
    wall = time.perf_counter() - t0
    t0 = time.perf_counter()
    rep = verify.verify(path)
    dt = time.perf_counter() - t0
  print(
    f"rows {rep.rows}: 'rsjax verify' {wall:.2f} s wall (start-up included, exit "
    f"{proc.returncode}); verify.verify {dt:.2f} s in process; all match: {rep.ok}"
  )
  out = {"rows": rep.rows, "command_wall_s": wall, "verify_s": dt, "ok": rep.ok}
  dump_json(json, out)
  return out
