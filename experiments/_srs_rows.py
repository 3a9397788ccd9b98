"""Per-image rows of the SRS experiment (``srs_deq.py``): certify one image, keep the rows,
summarize them.

Each (model, sigma, method) has one JSON-lines file: a header line with the settings
that fix its results (``run``), then one line per certified image. Rerunning appends
only the images without a row, so a run can stop anywhere and continue; a file whose
header differs from the run's settings is refused (it holds another run's rows).
"""

from __future__ import annotations

import fcntl
import json
import os
import time

import jax
import numpy as np

from rsjax import metrics, models, srs

RADII = (0.0, 0.25, 0.5, 0.75, 1.0)  # the radii of the table


def read_rows(path: str, run: dict) -> list[dict]:
  """The rows in ``path`` (none if it does not exist); a truncated last line (a run
  killed while writing) is dropped.

  Raises:
    ValueError: the file's header is not ``run`` (rows of other settings).
  """
  if not os.path.exists(path):
    return []
  with open(path) as fh:
    lines = fh.read().split("\n")
  rows = []
  for i, line in enumerate(lines):
    if not line.strip():
      continue
    try:
      obj = json.loads(line)
    except json.JSONDecodeError:
      if i >= len(lines) - 2:  # the last line, cut short
        break
      raise
    if i == 0:
      if obj.get("run") != run:
        raise ValueError(
          f"{path} holds rows of other settings:\n  {obj.get('run')}\nthis run:\n  "
          f"{run}\nmove it away to start over"
        )
      continue
    rows.append(obj)
  return rows


def append_row(path: str, run: dict, row: dict) -> None:
  """Appends one row (writing the header first for a new file; dropping a cut-short tail).
  Processes appending to one file take turns: each holds an exclusive lock while it reads
  the tail and appends (without it, one process's tail check could cut off a row that
  another was writing)."""
  with open(path, "ab+") as fh:
    fcntl.flock(fh, fcntl.LOCK_EX)  # released when the file closes
    fh.seek(0)
    keep = fh.read().rfind(b"\n") + 1  # the bytes up to the last whole line
    fh.truncate(keep)  # a run killed while writing left a cut-short tail: dropped
    lines = ([{"run": run}] if keep == 0 else []) + [row]
    fh.write("".join(json.dumps(obj) + "\n" for obj in lines).encode())
    fh.flush()
    os.fsync(fh.fileno())


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


def certify_image(
  cfg,
  deq_fn,
  variables,
  sigma: float,
  variant: str,
  m: int,
  x,
  label: int,
  image_id: int,
  compile_call: bool,
) -> dict:
  """Certifies one image (``x [1, H, W, C]``) with one method; its row (wall and CPU
  seconds, and the cores the process may use, included)."""
  kw = dict(
    sigma=sigma,
    num_classes=10,
    n0=cfg.n0,
    n=cfg.n,
    alpha=cfg.alpha,
    batch_size=cfg.chains,
    solver=models.as_solver_config(cfg.standard),
  )
  if variant == cfg.standard:
    kw.update(method="standard")
  else:
    kw.update(method="srs", srs=srs_config(cfg, variant, m))
  t0, c0 = time.perf_counter(), time.process_time()
  cert = srs.certify(
    jax.random.key(cfg.seed + 1), deq_fn, variables, x, ids=np.array([image_id]), **kw
  )
  row = {
    "id": int(image_id),
    "label": int(label),
    "predict": int(cert.prediction[0]),
    "radius": float(cert.radius[0]),
    "p_lower": float(cert.p_lower[0]),
    "count": int(cert.counts[0].max()),
    "seconds": time.perf_counter() - t0,
    "cpu_seconds": time.process_time() - c0,
    "compile": compile_call,
    "cores": len(os.sched_getaffinity(0)),
  }  # cores this process may run on
  if variant != cfg.standard:
    row.update(
      mismatch_upper=float(cert.mismatch_upper[0]),
      check_selected=int(cert.check_selected[0]),
      check_agree=int(cert.check_agree[0]),
      residual=float(cert.residual[0]),
    )
  return row


#: A row is timed only if its process ran for most of its wall time: wall seconds above
#: ``WAIT_RATIO`` times its CPU seconds mean it waited for a core (another job was on it).
WAIT_RATIO = 1.25


def waited(row: dict) -> bool:
  """Whether ``row`` was certified while its process waited for a core (not timed)."""
  return "cpu_seconds" in row and row["seconds"] > WAIT_RATIO * row["cpu_seconds"]


def summarize(cfg, rows: list[dict], variant: str, m: int, radii=RADII) -> dict:
  """Certified accuracy at ``radii``, ACR, seconds per image (compile calls and rows that
  ``waited`` for a core excluded: ``timed_images``, ``waited_images``) and the SRS check
  statistics of ``rows``."""
  correct = np.array([r["predict"] == r["label"] for r in rows], bool)
  radius = np.array([r["radius"] for r in rows], float)
  warm = [r for r in rows if not r["compile"] and not waited(r)]
  evals = f_evals(cfg, variant, m)

  def mean(key, rs):
    return float(np.mean([r[key] for r in rs])) if rs else None

  out = {
    "images": len(rows),
    "certified_accuracy": None
    if not rows
    else {
      f"{r:g}": float(a)
      for r, a in zip(radii, metrics.certified_accuracy(correct, radius, radii), strict=True)
    },
    "acr": metrics.average_certified_radius(correct, radius) if rows else None,
    "seconds_per_image": mean("seconds", warm),
    "cpu_seconds_per_image": mean("cpu_seconds", warm)
    if all("cpu_seconds" in r for r in warm)
    else None,
    "timed_images": len(warm),
    "waited_images": sum(waited(r) for r in rows if not r["compile"]),
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
      out["mean_mismatch_upper"] = mean("mismatch_upper", rows)
      out["mean_srs_residual"] = mean("residual", rows)
  return out


def add_speedups(results: dict, standard: str) -> None:
  """Speed-up of every method against the standard row (wall, CPU time and f-evals)."""
  base = results[standard]
  for res in results.values():
    for key, name in (
      ("seconds_per_image", "speedup_vs_standard"),
      ("cpu_seconds_per_image", "cpu_speedup_vs_standard"),
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
