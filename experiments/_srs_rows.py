"""The rows of the SRS experiment (``srs_deq.py``): its runs, certified and read, and their
summaries.

Each (model, sigma, method) is one run of ``rsjax.app.launch.run`` (``<name>.tsv`` with
``.run.json`` and ``.cert.jsonl``, which ``rsjax verify`` checks): :func:`certify_piece`
certifies it up to a round's last image or a time limit, :func:`read_run` gives its
rows as dicts (the TSV's row, the estimation count of the top class and the SRS check counts
from the certificate record); :func:`summarize`, :func:`losses_below_cap` and :func:`plot`
turn them into the experiment's JSON and figure.
"""

from __future__ import annotations

import os
import time

import numpy as np
from _common import certify_run
from _srs_config import Config, method_options

from rsjax import metrics, models, srs, stats
from rsjax.records import io
from rsjax.runs import record

RADII = (0.0, 0.25, 0.5, 0.75, 1.0)  # the radii of the table


def read_run(path: str, alpha: float) -> list[dict]:
  """The rows of the run in ``path`` (none if it does not exist), in file order: ``id``,
  ``label``, ``predict``, ``radius``, ``seconds`` (the row's ``time``: the wall time of its
  one-image call), ``p_lower`` and ``count`` (the top class's estimation count) from its
  certificate record, and for an SRS run the check counts ``check_selected`` (m_A) and
  ``check_agree`` (k) and ``mismatch_upper`` (``1 - LCB(k, m_A, alpha / 2)``)."""
  if not os.path.exists(path):
    return []
  res, recs = io.read_certify(path), record.read_records(path)
  rows = []
  for j, i in enumerate(res.idx):
    rec = recs[int(i)]
    row = {
      "id": int(i),
      "label": int(res.label[j]),
      "predict": int(res.predict[j]),
      "radius": float(res.radius[j]),
      "seconds": float(res.time[j]),
      "p_lower": float(rec["p_lower"]),
      "count": max((int(c) for c in (rec.get("counts") or {}).values()), default=0),
    }
    if "m_a" in rec:
      m_a, k = int(rec["m_a"]), int(rec["k"])
      lcb = float(stats.clopper_pearson_lower(k, m_a, alpha / 2)) if m_a else 0.0
      row.update(check_selected=m_a, check_agree=k, mismatch_upper=1.0 - lcb)
    rows.append(row)
  return rows


class _Stop(Exception):
  """A piece ends here: the next image is past the round or the time limit (``_Piece``)."""


class _Piece:
  """The test split as a run reads it, serving only the images in ``allowed`` (the rounds so
  far) and only until ``deadline`` (``time.perf_counter()``): past either, ``get_batch``
  raises :class:`_Stop` before the image is certified, so a run stops between rows (the rows
  written stay; ``rsjax.app.launch.run`` resumes after them)."""

  def __init__(self, dataset, allowed: set, deadline: float):
    self._dataset, self._allowed, self._deadline = dataset, allowed, deadline

  def __getattr__(self, name):
    return getattr(self._dataset, name)

  def __len__(self) -> int:
    return len(self._dataset)

  def get_batch(self, idx):
    if time.perf_counter() > self._deadline or not {int(i) for i in idx} <= self._allowed:
      raise _Stop
    return self._dataset.get_batch(idx)


def _rows(path: str) -> int:
  return len(io.read_certify(path).idx) if os.path.exists(path) else 0


def certify_piece(cfg: Config, st, v: str, test, allowed: set, deadline: float) -> int:
  """Certifies run ``v`` of ``st`` (one (model, sigma)) through ``_common.certify_run`` (the
  registry's ``deq-standard`` or ``srs``, one image per call, ``cfg.chains`` samples per
  pass) up to the round's last image or ``deadline``; returns the rows it wrote."""
  method, options = method_options(cfg, v, st.m)
  before = _rows(st.paths[v])
  try:
    certify_run(
      st.paths[v],
      st.model,
      st.model_dir,
      _Piece(test, allowed, deadline),
      sigma=st.sigma,
      skip=cfg.images_every,
      n0=cfg.n0,
      n=cfg.n,
      alpha=cfg.alpha,
      seed=cfg.seed,
      method=method,
      options=options,
      batch_size=cfg.chains,
      inputs_per_call=1,
    )
  except _Stop:
    pass
  return _rows(st.paths[v]) - before


def srs_config(cfg, variant: str, m: int) -> srs.SRSConfig:
  """SRS with ``variant`` ("3B") chains, a 10-step warm-up of the same solver and ``m``
  check samples solved with the standard solver."""
  chain = models.as_solver_config(variant)
  return srs.SRSConfig(
    solver=chain,
    warmup=chain.replace(steps=cfg.warmup_steps),
    check_solver=models.as_solver_config(cfg.standard),
    m=m,
  )


def f_evals(cfg, variant: str, m: int) -> int:
  """Evaluations of the equilibrium map per image (selection + estimation + checks)."""
  steps = models.as_solver_config(variant).steps
  full = models.as_solver_config(cfg.standard).steps
  if variant == cfg.standard:
    return (cfg.n0 + cfg.n) * steps

  def chain_evals(num):  # warm-up chunk, then `steps` per sample
    c = min(cfg.chains, num)
    return c * cfg.warmup_steps + (num - c) * steps

  return chain_evals(cfg.n0) + chain_evals(cfg.n) + m * full


def summarize(cfg, rows: list[dict], variant: str, m: int, radii=RADII) -> dict:
  """Certified accuracy at ``radii``, ACR, seconds per image and the SRS check statistics of
  ``rows``. ``seconds_per_image`` is the median of the rows' wall seconds: the first call of
  each process compiles, and the median leaves those calls (and rows slowed by another job on
  the core) out; a run records no CPU time."""
  correct = np.array([r["predict"] == r["label"] for r in rows], bool)
  radius = np.array([r["radius"] for r in rows], float)
  evals = f_evals(cfg, variant, m)

  def mean(key):
    return float(np.mean([r[key] for r in rows])) if rows else None

  out = {
    "images": len(rows),
    "certified_accuracy": None
    if not rows
    else {
      f"{r:g}": float(a)
      for r, a in zip(radii, metrics.certified_accuracy(correct, radius, radii), strict=True)
    },
    "acr": metrics.average_certified_radius(correct, radius) if rows else None,
    "seconds_per_image": float(np.median([r["seconds"] for r in rows])) if rows else None,
    "wall_seconds_total": float(sum(r["seconds"] for r in rows)),
    "f_evals_per_image": evals,
    "solver_steps_per_sample": evals / (cfg.n0 + cfg.n),
    "abstain_rate": float(np.mean([r["predict"] < 0 for r in rows])) if rows else None,
  }
  if variant != cfg.standard:
    out["check_f_eval_share"] = m * models.as_solver_config(cfg.standard).steps / evals
    if rows:
      sel = sum(r["check_selected"] for r in rows)
      out["check_agreement"] = sum(r["check_agree"] for r in rows) / max(sel, 1)
      out["mean_mismatch_upper"] = mean("mismatch_upper")
  return out


def add_speedups(results: dict, standard: str) -> None:
  """Speed-up of every method against the standard row (wall time and f-evals)."""
  base = results[standard]
  for res in results.values():
    for key, name in (
      ("seconds_per_image", "speedup_vs_standard"),
      ("f_evals_per_image", "f_eval_ratio_vs_standard"),
    ):
      ok = base.get(key) and res.get(key)
      res[name] = base[key] / res[key] if ok else None


def plot(path: str, curves: dict, runs: dict) -> None:
  """Certified accuracy against radius, one panel per (model, sigma), one curve per method;
  dotted: SRS's cap. ``curves[tag][method]`` are rows, ``runs[tag]`` the JSON's entries."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  from _common import save_figure

  fig, axes = plt.subplots(1, len(curves), figsize=(4.2 * len(curves), 3.6), squeeze=False)
  for ax, (tag, methods) in zip(axes[0], curves.items(), strict=True):
    top = 1.05 * runs[tag]["standard_radius_cap"]
    grid = np.linspace(0.0, top, 400)
    for name, rows in methods.items():
      correct = np.array([r["predict"] == r["label"] for r in rows], bool)
      radius = np.array([r["radius"] for r in rows], float)
      acc = metrics.certified_accuracy(correct, radius, grid) if rows else np.zeros_like(grid)
      ax.plot(grid, acc, label=name, lw=2.2 if name.startswith("standard") else 1.2)
    ax.axvline(runs[tag]["srs_radius_cap"], ls=":", c="k", lw=1)
    ax.set(
      title=f"{tag} ({runs[tag]['images_done']} of {runs[tag]['images_total']} images)",
      xlabel="radius",
      ylim=(0, 1.02),
    )
    ax.grid(alpha=0.3)
  axes[0][0].set_ylabel("certified accuracy")
  axes[0][0].legend(fontsize=8, loc="lower left")
  save_figure(fig, path, 130)


def _m_to_reach(n_a: int, n: int, alpha: float, radius: float, sigma: float) -> int | None:
  """The smallest m with which SRS's bound on an image whose SRS count is ``n_a`` would reach
  ``radius`` (``srs.min_check_samples`` with ``count``); None if no m does (the alpha / 2 that
  the bound spends on the count alone falls short)."""
  try:
    return srs.min_check_samples(radius, n, alpha, sigma, count=n_a)
  except ValueError as e:
    if "out of reach" not in str(e):
      raise
    return None


def losses_below_cap(
  cfg, standard_rows: list[dict], rows: list[dict], variant: str, m: int, sigma: float, radii=RADII
) -> dict:
  """Why an SRS method falls behind standard RS below its cap, radius by radius.

  An image is lost at ``r`` when standard RS certifies it correctly at ``r`` and the SRS
  method does not. Each lost image is put down to the first cause that holds:
  ``"labels"`` (SRS predicts another class, or its count of the class is lower than standard
  RS's: its approximate solves label differently), ``"check_disagreements"`` (a check sample
  that SRS labelled as the class got another label from the full solver), ``"alpha_split"``
  (the two-stage bound spends alpha / 2 on the count, and that alone falls short of
  ``Phi(r / sigma)`` whatever m) or ``"too_few_checks"``, with ``m_needed``: the m that would
  have kept them all (``_m_to_reach``) and the method's f-eval ratio against standard RS at
  that m.

  Returns:
    ``{"r": {"lost": int, "causes": {cause: int}, "m_needed": int | None,
    "f_eval_ratio_at_m_needed": float | None}}`` for every ``r`` in ``radii`` below the cap.
  """
  cap = srs.max_certifiable_radius(cfg.n, m, cfg.alpha, sigma)
  std = {r["id"]: r for r in standard_rows}

  def certified(row: dict, radius: float) -> bool:
    return row["predict"] == row["label"] and row["radius"] >= radius

  out = {}
  for radius in (r for r in radii if r < cap):
    lost = [
      (std[r["id"]], r)
      for r in rows
      if r["id"] in std and certified(std[r["id"]], radius) and not certified(r, radius)
    ]
    causes, needed = {}, []
    for s, r in lost:
      m_r = None
      if r["predict"] != r["label"] or r["count"] < s["count"]:
        cause = "labels"
      elif r["check_agree"] < r["check_selected"]:
        cause = "check_disagreements"
      else:
        m_r = _m_to_reach(r["count"], cfg.n, cfg.alpha, radius, sigma)
        cause = "alpha_split" if m_r is None else "too_few_checks"
      if m_r is not None:
        needed.append(m_r)
      causes[cause] = causes.get(cause, 0) + 1
    m_needed = max(needed) if needed else None
    out[f"{radius:g}"] = {
      "lost": len(lost),
      "causes": causes,
      "m_needed": m_needed,
      "f_eval_ratio_at_m_needed": (
        f_evals(cfg, cfg.standard, m_needed) / f_evals(cfg, variant, m_needed)
      )
      if m_needed
      else None,
    }
  return out
