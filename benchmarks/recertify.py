"""Incremental certification (``rsjax recertify``) against certifying each child from scratch.

For each sigma: trains a parent LeNet with ``rsjax train`` (the demo's: mnist5k, 20 epochs),
makes its children (``bf16``: the same model directory run in bfloat16; ``int8``: weight-only
int8; ``prune``: magnitude pruning to ``--sparsity``, ``prune90`` to 90%; ``tuned``: ``rsjax train --init`` of the
parent for ``--tune-epochs``), and certifies the test digits in blocks of ``--block`` images,
each block its own runs (so the work resumes by block, and every run stays small):

* the parent: ``rsjax certify`` (N0 100, N ``--n``, alpha 0.001);
* each child recertified from that block's parent run: ``rsjax recertify`` (``--n-disagree``
  disagreement samples an input at alpha_2 0.001; ``--fallback`` for the pruned and tuned);
* each child from scratch: ``rsjax certify`` as the parent.

A run left unfinished resumes where it stopped (``rsjax certify`` resumes by default). Then
``--report`` reads every block's finished runs, checks each with ``rsjax verify`` and writes
the samples, seconds, disagreement and certified accuracy of each child and sigma, over the
images both its runs certified (``--out``).

The paper's own baseline is also run: each child from scratch on as many samples as
``rsjax recertify`` draws (N0 100 + N ``--n-disagree`` - 100, at alpha 0.002, the child's
total). Commands (RESULTS.md's numbers; ``ROOT`` a scratch folder; each command is cut into
pieces of at most 10 minutes by ``timeout 600`` and run again until it finishes)::

  python -m benchmarks.recertify --root ROOT --blocks 0 --children int8 bf16
  python -m benchmarks.recertify --root ROOT --blocks 0 --children prune tuned
  python -m benchmarks.recertify --root ROOT --blocks 1 --children int8 bf16
  python -m benchmarks.recertify --root ROOT --blocks 0 --children prune90
  python -m benchmarks.recertify --root ROOT --blocks 2 3 4 --children int8 bf16
  python -m benchmarks.recertify --root ROOT --report
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from benchmarks.common import dump_json
from rsjax import cli, models, verify
from rsjax.runs import io

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


def _parent_dir(a: argparse.Namespace, sigma: float) -> str:
  d = os.path.join(a.root, f"lenet_{sigma:g}")
  if not os.path.isfile(os.path.join(d, "config.json")):
    _cli("train", "--dataset", "mnist5k", "--model", "lenet", "--sigma", sigma, "--epochs",
         a.epochs, "--out", d, "--quiet", "--overwrite")  # fmt: skip
  return d


def _child_dir(a: argparse.Namespace, sigma: float, name: str) -> tuple[str, tuple]:
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


def _path(a: argparse.Namespace, sigma: float, block: int, what: str) -> str:
  return os.path.join(a.root, f"s{sigma:g}", f"b{block}", f"{what}.tsv")


def run_block(a: argparse.Namespace, sigma: float, block: int) -> None:
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
    _cli("recertify", parent, d, _path(a, sigma, block, f"{name}_re"), "--N", a.n_disagree,
         "--batch", a.batch, "--quiet", *fb, *extra)  # fmt: skip
  for name in a.children:  # the paper's baseline: from scratch on as many samples
    d, extra = _child_dir(a, sigma, name)
    same = (*common, "--N", a.n_disagree - N0, "--alpha", 0.002)  # recertify's total alpha
    _cli("certify", d, _path(a, sigma, block, f"{name}_scratch_n"), *same, *extra)
  for name in a.children:
    d, extra = _child_dir(a, sigma, name)
    _cli("certify", d, _path(a, sigma, block, f"{name}_scratch"), *rows, *extra)


def _complete(path: str, want: int) -> bool:
  return os.path.isfile(path) and len(io.read_certify(path).idx) == want


def _runs(a: argparse.Namespace, sigma: float, what: str) -> list[str]:
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


def child_report(a: argparse.Namespace, sigma: float, name: str) -> dict | None:
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


def report(a: argparse.Namespace) -> dict:
  """Every sigma's parent and children (the JSON of ``--out``)."""
  out: dict = {"settings": {k: v for k, v in vars(a).items() if k not in ("root", "report")}}
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


def main(argv: list[str] | None = None) -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--root", required=True, help="where the models and runs go (kept: resumable)")
  p.add_argument("--sigmas", type=float, nargs="+", default=[0.25, 0.5])
  p.add_argument("--blocks", type=int, nargs="*", default=[0])
  p.add_argument("--block", type=int, default=10, help="images a block")
  p.add_argument("--max-blocks", type=int, default=40, help="blocks --report looks for")
  p.add_argument("--children", nargs="*", default=list(CHILDREN), choices=CHILDREN)
  p.add_argument("--epochs", type=int, default=20)
  p.add_argument("--n", type=int, default=100_000)
  p.add_argument("--n-disagree", type=int, default=20_000)
  p.add_argument("--batch", type=int, default=5000)
  p.add_argument("--sparsity", type=float, default=0.5)
  p.add_argument("--tune-epochs", type=int, default=1)
  p.add_argument("--tune-lr", type=float, default=0.01)
  p.add_argument("--report", action="store_true", help="write --out from the finished runs")
  p.add_argument("--out", default="benchmarks/results/recertify.json")
  a = p.parse_args(argv)
  if a.report:
    dump_json(a.out, report(a))
    return
  for block in a.blocks:
    for sigma in a.sigmas:
      run_block(a, sigma, block)
      print(f"block {block} sigma {sigma:g}: done", flush=True)


if __name__ == "__main__":
  main()
