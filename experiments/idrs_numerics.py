"""Numerical validation of the IDRS xi functions (scipy ncx2) against independent quadrature.

For every (dimension N, p_B, log-ratio t = log(sigma1/sigma0), distance
u = a/sigma0) of a grid, ``rsjax.idrs`` computes the worst-case ball (quantile
``ncx2.ppf``/``isf``) and xi (``ncx2.cdf``/``sf``). The reference
(``rsjax.idrs.ball_probability``) integrates the exact 1-D Gaussian
slice probability against the central chi2_{N-1} density with adaptive
quadrature, using no noncentral code. We report the relative error of
``P0(ball) = p_B`` and the absolute error of xi, and count the cases that
raise ``IDRSNumericalError`` (noncentrality above 1e10: never a silent value).

Command (about 1.5 minutes on 2 cores)::

  python experiments/idrs_numerics.py

Output: ``results/idrs_numerics.json`` and ``idrs_numerics.png``.
Numbers produced (376 grid points; N in {2, 784, 3072, 150528, 1048576}, p_B in
{1e-12, 7e-5, 1e-2, 0.3}, t in {+-0.05, +-1e-3, +-1e-5}, u in {1e-3, 0.5, 3},
plus t = +-1e-4 at u = 3 for the two largest N)::

  evaluated 336, refused (IDRSNumericalError) 40 (all: noncentrality 2.25e10 > 1e10)
  max |xi - reference| by N: 2: 9.4e-12, 784: 3.1e-12, 3072: 2.2e-12,
                             150528: 2.9e-11, 1048576: 7.4e-10
  max relative error of P0(ball) vs p_B: 7.4e-10
  ImageNet size (150,528) is as reliable as CIFAR size.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import time

import numpy as np
from _common import RESULTS, parser, save_figure, write_json

from rsjax import idrs
from rsjax.idrs import ball_probability, xi_side


@dataclasses.dataclass(frozen=True)
class Config:
  dims: tuple[int, ...] = (2, 784, 3072, 150528, 1048576)
  p_b: tuple[float, ...] = (1e-12, 7e-5, 1e-2, 0.3)
  ts: tuple[float, ...] = (-0.05, -1e-3, -1e-5, 1e-5, 1e-3, 0.05)  # log(sigma1 / sigma0)
  us: tuple[float, ...] = (1e-3, 0.5, 3.0)  # a / sigma0
  # plus t = +-1e-4 at u = 3 for the two largest dims
  extra_ts: tuple[float, ...] = (-1e-4, 1e-4)


def get_config(quick: bool = True) -> Config:
  """The grid of the run (the numbers it produced are in the module docstring).

  Command (about 1.5 minutes on 2 cores; there is no longer mode, ``quick`` is ignored)::

    python experiments/idrs_numerics.py
  """
  del quick
  return Config()


def run(cfg: Config, out_dir: str = RESULTS) -> dict:
  t0 = time.time()
  os.makedirs(out_dir, exist_ok=True)
  rows = []
  grid = list(itertools.product(cfg.dims, cfg.p_b, cfg.ts, cfg.us))
  grid += [(d, pb, t, 3.0) for d in cfg.dims[-2:] for pb in cfg.p_b for t in cfg.extra_ts]
  refused = 0
  for dim, p_b, t, u in grid:
    greater = t < 0
    try:
      val, q, lam0, lam1 = xi_side(
        np.array(u), abs(np.expm1(2 * t)), np.exp(2 * t), np.array(p_b), dim, greater
      )
    except idrs.IDRSNumericalError as e:
      refused += 1
      rows.append(dict(dim=dim, p_b=p_b, t=t, u=u, refused=str(e)[:120]))
      continue
    q, lam0, lam1, val = float(q), float(lam0), float(lam1), float(val)
    pb_ref = ball_probability(q, dim, lam0, upper=not greater)
    xi_ref = ball_probability(q * np.exp(-2 * t), dim, lam1, upper=not greater)
    rows.append(
      dict(
        dim=dim,
        p_b=p_b,
        t=t,
        u=u,
        nc=lam0,
        xi=val,
        xi_ref=xi_ref,
        xi_abs_err=abs(val - xi_ref),
        p_b_rel_err=abs(pb_ref - p_b) / p_b,
      )
    )
  ok = [r for r in rows if "refused" not in r]
  summary = dict(
    evaluated=len(ok),
    refused=refused,
    max_xi_abs_err=max(r["xi_abs_err"] for r in ok),
    max_xi_abs_err_by_dim={d: max(r["xi_abs_err"] for r in ok if r["dim"] == d) for d in cfg.dims},
    max_p_b_rel_err=max(r["p_b_rel_err"] for r in ok),
    refused_noncentralities=sorted({r["refused"].split()[1] for r in rows if "refused" in r}),
    seconds=time.time() - t0,
  )
  print(json.dumps(summary, indent=1))

  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, ax = plt.subplots(figsize=(6.5, 4.0))
  for i, d in enumerate(cfg.dims):
    pts = [r for r in ok if r["dim"] == d]
    ax.scatter(
      [max(r["nc"], 1e-8) for r in pts],
      [max(r["xi_abs_err"], 1e-18) for r in pts],
      s=10,
      color=f"C{i}",
      label=f"N={d}",
    )
  ax.set_xscale("log")
  ax.set_yscale("log")
  ax.set_xlabel("noncentrality lambda0")
  ax.set_ylabel("|xi (scipy ncx2) - xi (quadrature)|")
  ax.set_title("IDRS xi: scipy ncx2 vs independent quadrature")
  ax.legend(fontsize=7)
  save_figure(fig, os.path.join(out_dir, "idrs_numerics.png"), dpi=130)
  write_json(out_dir, "idrs_numerics.json", dict(summary=summary, rows=rows))
  print(f"wrote {out_dir}/idrs_numerics.json in {time.time() - t0:.0f} s")
  return summary


def main(argv=None):
  run(get_config(), parser(__doc__).parse_args(argv).out)


if __name__ == "__main__":
  main()
