"""The report of the SRS experiment (``srs_deq.py``): the JSON of everything its runs hold so
far, its plot, and the measured time share of the check solves."""

from __future__ import annotations

import dataclasses
import json
import os
import time

import _srs_rows as rows_lib
import jax
from _common import repo_path
from _srs_config import Config, check_samples, method_options, variant_names

import rsjax
from rsjax import srs, stats
from rsjax.records import io


def check_time_share(cfg: Config, model, sigma: float, variant: str, x, ids) -> float:
  """Measured share of SRS estimation time spent in the m check solves (30A from z = 0):
  the same ``srs_sample`` call with and without check samples, after compilation."""
  m = check_samples(cfg, sigma)
  deq_fn, variables = rsjax.models.to_deq_fn(model)
  settings = rsjax.Sampling(n0=cfg.n0, n=cfg.n, alpha=cfg.alpha, batch_size=cfg.chains)
  times = {}
  for mm in (0, m):
    call = (  # noqa: E731
      lambda i, mm=mm: srs.srs_sample(
        jax.random.key(cfg.seed + 1),
        deq_fn,
        variables,
        x[i : i + 1],
        sigma=sigma,
        num_classes=10,
        num=cfg.n,
        config=rows_lib.srs_config(cfg, variant, mm),
        settings=settings,
        check_key=jax.random.key(cfg.seed + 2),
        ids=ids[i : i + 1],
      )
    )
    call(0)  # compile
    t0 = time.perf_counter()
    for i in range(cfg.share_images):
      call(i)
    times[mm] = time.perf_counter() - t0
  return float(max(0.0, 1.0 - times[0] / times[m]))


def write_report(cfg: Config, ids, setups: dict, out_path: str, t_start: float) -> dict:
  """The JSON of everything the runs hold so far (methods compared on the images every method
  of a (model, sigma) has done) and its plot."""
  names = variant_names(cfg)
  report = {
    "config": dataclasses.asdict(cfg),
    "dataset": "mnist5k (train 4000 / test 1000)",
    "images": [int(i) for i in ids],
    "radii": list(rows_lib.RADII),
    "timing": "seconds_per_image: median wall seconds of a run's one-image calls (its time "
    "column); runs record no CPU time",
    "runs": {},
    "jax": jax.__version__,
    "devices": [str(d) for d in jax.devices()],
  }
  curves, done_all = {}, True
  for tag, st in setups.items():
    by_variant = {v: {r["id"]: r for r in rows_lib.read_run(st.paths[v], cfg.alpha)} for v in names}
    common = [int(i) for i in ids if all(int(i) in rows for rows in by_variant.values())]
    done_all &= len(common) == len(ids)
    results = {}
    for v, name in names.items():
      rows = [by_variant[v][i] for i in common]
      results[name] = rows_lib.summarize(cfg, rows, v, st.m)
      method, options = method_options(cfg, v, st.m)
      results[name].update(run=repo_path(st.paths[v]), method=method, options=options)
      if v != cfg.standard:  # images lost to standard RS below the cap, and why
        results[name]["lost_below_cap"] = rows_lib.losses_below_cap(
          cfg, [by_variant[cfg.standard][i] for i in common], rows, v, st.m, st.sigma
        )
      if len(common) == len(ids) and v != cfg.standard and cfg.share_images:
        results[name]["check_time_share"] = st.share.setdefault(
          v, check_time_share(cfg, st.model, st.sigma, v, st.x, ids)
        )
      curves.setdefault(tag, {})[name] = rows
    if common:
      rows_lib.add_speedups(results, names[cfg.standard])
    report["runs"][tag] = {
      "model": st.kind,
      "sigma": st.sigma,
      "images_done": len(common),
      "images_total": len(ids),
      "n0": cfg.n0,
      "n": cfg.n,
      "m": st.m,
      "alpha": cfg.alpha,
      "srs_radius_cap": srs.max_certifiable_radius(cfg.n, st.m, cfg.alpha, st.sigma),
      "standard_radius_cap": float(stats.max_radius(cfg.n, cfg.alpha, st.sigma)),
      "num_params": rsjax.models.count_params(st.model),
      "train_history": st.history,
      "noisy_accuracy_from_zero": st.acc,
      "resnet_same_size": st.resnet,
      "results": results,
    }
  for kind, sigma in cfg.runs():  # not reached yet in this call
    tag = f"{kind} sigma={sigma:g}"
    if tag not in report["runs"]:
      done_all = False
      report["runs"][tag] = {
        "model": kind,
        "sigma": sigma,
        "images_done": 0,
        "images_total": len(ids),
        "results": {},
      }
  report["complete"] = done_all
  report["seconds_this_call"] = time.perf_counter() - t_start
  os.makedirs(os.path.dirname(out_path) or ".", exist_ok=True)
  io.atomic_write_text(out_path, json.dumps(report, indent=1))
  if any(rows for c in curves.values() for rows in c.values()):
    rows_lib.plot(os.path.splitext(out_path)[0] + ".png", curves, report["runs"])
  return report


def table(report: dict) -> str:
  """The report's runs as the module docstring's table: per (model, sigma) the images every
  method has, certified accuracy of the standard row and of each SRS row at the radii, ACR
  and the wall speed-up (median seconds per image) of each method."""

  def acc(res):
    return " ".join(f"{a:.3f}" for a in res["certified_accuracy"].values())

  def ratio(value):
    return "n/a" if value is None else f"{value:.1f}x"

  lines = []
  for tag, run in report["runs"].items():
    if not run["images_done"]:  # no run yet, or no image every method has
      lines.append(f"{tag}: no images yet")
      continue
    lines.append(f"{tag}: {run['images_done']} of {run['images_total']} images")
    for name, r in run["results"].items():
      lines.append(
        f"  {name:<13} cert. acc. {acc(r)}  ACR {r['acr']:.3f}  "
        f"s/image {r['seconds_per_image']:.1f}  speed-up {ratio(r['speedup_vs_standard'])}  "
        f"f-eval ratio {ratio(r['f_eval_ratio_vs_standard'])}"
      )
  return "\n".join(lines)
