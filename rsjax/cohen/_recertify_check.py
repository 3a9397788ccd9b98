"""The check of ``--method recertify`` (``rsjax verify``'s half; NumPy and SciPy only), and
the link of a child run to its parent run.

A child run names its parent in its options, all of them part of its claim (so of its key):
``parent`` (the parent's result file), ``parent_claim`` (the parent's claim digest),
``parent_model`` (the parent's model fingerprint) and ``parent_records`` (the SHA-256 of the
parent's certificate record, ``<parent>.cert.jsonl``, when the child was certified). The
check refuses a child whose parent is missing or differs in any of them, then derives every
child row again, with the formulas written out here, from the parent's recorded counts and
the child's own disagreement counts (``rsjax.cohen._recertify`` states the bound).
``rsjax verify`` also verifies the parent run itself.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import numpy as np

from rsjax.claims import Mismatch, binary_radius, cp_lower, cp_upper, dense
from rsjax.records.spec import RunFormatError, RunSpec
from rsjax.runs import record as record_lib

__all__ = ["check_recertify", "link_issues", "parent_of", "records_digest", "stated_alpha"]

#: The parent's noises the bound holds for (Gaussian, L2).
GAUSSIAN = ("gaussian", "gaussian_fast")


def records_digest(result_file: str | os.PathLike) -> str:
  """The SHA-256 (hex) of a run's certificate record (``<file>.cert.jsonl``), as bytes."""
  h = hashlib.sha256()
  with open(record_lib.record_path(result_file), "rb") as f:
    h.update(f.read())
  return h.hexdigest()


def stated_alpha(parent_alpha: float, alpha: float, fallback: bool) -> float:
  """The level each child row claims: ``alpha_1 + alpha_2`` (+ ``alpha_1`` with fallback)."""
  return float(parent_alpha) + float(alpha) + (float(parent_alpha) if fallback else 0.0)


def parent_of(options: dict) -> RunSpec:
  """The parent run a child's options name.

  Raises:
    ValueError: it names none, or the parent's run record is missing or unreadable.
  """
  path = options.get("parent")
  if not path:
    raise ValueError(
      "--method recertify certifies a child from its parent run: "
      "rsjax recertify PARENT.tsv CHILD_MODEL OUT.tsv"
    )
  try:
    return RunSpec.read(str(path))
  except RunFormatError as e:
    raise ValueError(f"the parent run is missing or unreadable: {e}") from None


def link_issues(parent: RunSpec, options: dict, *, sigma: float, noise: str, multiclass: bool,
                dataset: str) -> list[str]:  # fmt: skip
  """Why ``parent`` is not the parent the child's options and settings name (empty: it is)."""
  p = options.get("parent")
  out = []
  if parent.claim_digest() != options.get("parent_claim"):
    out.append(f"the parent {p!r} states another claim than the one the child was certified from")
  if parent.model.fingerprint != options.get("parent_model"):
    out.append(f"the parent {p!r} names another model than the one the child was certified from")
  try:
    digest = records_digest(str(p))
  except OSError:
    digest = None
  if digest != options.get("parent_records"):
    out.append(f"the parent's certificate record {p!r} changed since the child was certified")
  if parent.method != "cohen" or parent.options.get("grid") is not None:
    out.append(f"the parent {p!r} is no fixed-N --method cohen run")
  if parent.sampling.get("noise") not in GAUSSIAN or parent.sampling.get("noise") != noise:
    out.append(f"the parent's noise {parent.sampling.get('noise')} is not the child's {noise}")
  if parent.sigma != sigma or parent.multiclass != multiclass or parent.data.name != dataset:
    out.append(f"the child's sigma, radius or dataset differ from the parent's {p!r}")
  return out


def _same_rows(parent: RunSpec, child: RunSpec) -> list[str]:
  """Why the child does not certify the parent's inputs, all of them: another split, size or
  array file (row ``i`` would be another image), or another declared range (a range chosen
  after the parent's counts were seen picks the rows its noise favoured)."""
  differ = parent.data.differences(child.data, rows=True)
  if differ:
    return [f"the child's {', '.join(differ)} of the data differ from the parent's"]
  return []


def parent_bounds(parent: RunSpec, recs: dict, idx: list[int]) -> tuple[np.ndarray, ...]:
  """``(valid, predict, p_lower, p_upper)`` of the parent's rows ``idx`` from its recorded
  counts (Cohen's certificate, binary or multiclass; ``p_upper`` 1 in the binary case)."""
  s = parent.sampling
  n0, n, a1, c = int(s["n0"]), int(s["n"]), float(s["alpha"]), parent.data.num_classes
  b = len(idx)
  valid, pred = np.zeros(b, bool), np.full(b, -1, np.int64)
  pa, pb = np.zeros(b), np.ones(b)
  for j, i in enumerate(idx):
    r = recs.get(int(i), {})
    c0, c1 = dense(r.get("counts0"), c), dense(r.get("counts"), c)
    if c0 is None or c1 is None or c0.sum() != n0 or c1.sum() != n or r.get("n") != n:
      continue
    guess = int(np.argmax(c0))
    others = np.delete(c1, guess)
    valid[j] = True
    if parent.multiclass:
      pa[j] = cp_lower(c1[guess], n, a1 / 2)
      up = cp_upper(others.max(initial=0), n, a1 / (2 * max(c - 1, 1)))
      pb[j] = min(float(up), 1.0 - pa[j])
      pred[j] = guess if pa[j] > pb[j] else -1
      pb[j] = pb[j] if pred[j] != -1 else 1.0  # an abstained row: no bound kept (Parent.of)
    else:
      pa[j] = cp_lower(c1[guess], n, a1)
      pred[j] = guess if pa[j] >= 0.5 else -1
  return valid, pred, pa, pb


def _child_certificate(pred, pa, pb, zeta, sigma, multiclass):
  """The child's ``(predict, radius, p_lower)`` from the parent's bounds and ``zeta``."""
  a = pa - zeta
  gauss = {"family": "gaussian", "norm": "l2", "name": "gaussian"}
  if multiclass:
    b = np.minimum(pb + zeta, 1.0 - a)
    ok = (pred != -1) & (a > b) & (a > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
      from scipy import special

      r = 0.5 * sigma * (special.ndtri(np.clip(a, 0, 1)) - special.ndtri(np.clip(b, 0, 1)))
    radius = np.where(ok, np.maximum(r, 0.0), 0.0)
  else:
    ok = (pred != -1) & (a > 0.5)
    radius = np.where(ok, binary_radius(np.clip(a, 0, 1), sigma, gauss, 1), 0.0)
  return np.where(ok, pred, -1), radius, np.maximum(a, 0.0)


def _fallback_row(fb: Any, parent: RunSpec, sigma: float) -> tuple[int, float, float] | None:
  """``(predict, radius, p_lower)`` of a row certified from scratch (Cohen's CERTIFY at the
  parent's n0, n, alpha_1), or None when its record is not one."""
  s = parent.sampling
  n0, n, a1, c = int(s["n0"]), int(s["n"]), float(s["alpha"]), parent.data.num_classes
  if not isinstance(fb, dict):
    return None
  c0, c1 = dense(fb.get("counts0"), c), dense(fb.get("counts"), c)
  if c0 is None or c1 is None or c0.sum() != n0 or c1.sum() != n:
    return None
  guess = int(np.argmax(c0))
  others = np.delete(c1, guess)
  pb = cp_upper(others.max(initial=0), n, a1 / (2 * max(c - 1, 1))) if parent.multiclass else 1
  k = c1[guess]
  pa = cp_lower(k, n, a1 / 2 if parent.multiclass else a1)
  pred, radius, _ = _child_certificate(
    np.array([guess]), np.array([pa]), np.minimum(np.array([pb], float), 1 - pa),
    np.zeros(1), sigma, parent.multiclass,
  )  # fmt: skip
  if not parent.multiclass and pa == 0.5:  # Cohen predicts at exactly 1/2, radius 0
    pred = np.array([guess])
  return int(pred[0]), float(radius[0]), float(pa)


def check_recertify(
  cert: dict, res: Any, recs: dict, *, rtol: float, atol: float, **_: object
) -> list[Mismatch]:
  """Every child row again from the parent's counts and its own disagreement counts."""
  opts, s = cert["settings"], cert["sampling"]
  try:
    parent = parent_of(opts)
  except ValueError as e:
    return [Mismatch(-1, str(e))]
  why = link_issues(parent, opts, sigma=float(cert["sigma"]), noise=s["noise"],
                    multiclass=bool(cert["multiclass"]), dataset=cert["dataset"])  # fmt: skip
  why += _same_rows(parent, RunSpec.read(str(cert["path"])))
  if why:
    return [Mismatch(-1, w) for w in why]
  issues = []
  a1, n, a2 = float(parent.sampling["alpha"]), int(s["n"]), float(s["alpha"])
  fallback = bool(opts.get("fallback"))
  want = stated_alpha(a1, a2, fallback)
  if not isinstance((cert.get("details") or {}).get("alpha"), float) or not np.isclose(
    cert["details"]["alpha"], want, rtol=1e-12, atol=0
  ):
    issues.append(Mismatch(-1, f"the run states alpha {cert.get('details')}, its bound {want}"))
  idx = [int(i) for i in res.idx]
  precs = record_lib.read_records(str(opts["parent"]))
  issues.extend(
    Mismatch(i, "the input is not the parent's input of this row")
    for i in idx
    if i in recs and recs[i].get("input") != (precs.get(i) or {}).get("input")
  )
  valid, pred, pa, pb = parent_bounds(parent, precs, idx)
  for j, i in enumerate(idx):
    issues.extend(_row_issues(res, j, i, recs.get(i), parent, valid[j], pred[j], pa[j], pb[j],
                              n=n, a2=a2, fallback=fallback, sigma=float(cert["sigma"]),
                              rtol=rtol, atol=atol))  # fmt: skip
  return issues


def _close(a: float, b: Any, rtol: float, atol: float) -> bool:
  return isinstance(b, (int, float)) and abs(float(b) - a) <= atol + rtol * abs(a)


def _row_issues(res, j, i, r, parent, valid, pred, pa, pb, *, n, a2, fallback, sigma, rtol, atol):
  """The mismatches of child row ``j`` (dataset index ``i``, record ``r``)."""
  if r is None:
    return [Mismatch(i, "no certificate record for this row")]
  if not valid:
    return [Mismatch(i, "the parent has no consistent record of this row")]
  rp = r.get("parent") or {}
  if (
    rp.get("predict") != pred
    or not _close(pa, rp.get("p_lower"), rtol, atol)
    or (parent.multiclass and not _close(pb, rp.get("p_upper"), rtol, atol))
  ):
    return [Mismatch(i, f"the parent's certificate {rp} is not the parent run's ({pred}, {pa})")]
  d = dense(r.get("counts"), 2)
  if d is None or d.sum() != n or r.get("n") != n or r.get("counts0") is not None:
    return [Mismatch(i, f"disagreement counts {r.get('counts')} are not {n} samples")]
  zeta = float(cp_upper(d[1], n, a2))
  p, radius, p_low = _child_certificate(np.array([pred]), np.array([pa]), np.array([pb]),
                                        np.array([zeta]), sigma, parent.multiclass)  # fmt: skip
  p, radius, p_low, used = int(p[0]), float(radius[0]), float(p_low[0]), False
  if fallback and p == -1:
    got = _fallback_row(r.get("fallback"), parent, sigma)
    if got is None:
      return [Mismatch(i, "a row the bound leaves has no fallback counts")]
    (p, radius, p_low), used = got, True
  elif r.get("fallback") is not None:
    return [Mismatch(i, "a fallback record on a row that had none")]
  out = []
  if not _close(zeta, r.get("zeta"), rtol, atol) or not _close(zeta, res.extra["zeta"][j], rtol,
                                                                atol):  # fmt: skip
    out.append(Mismatch(i, f"zeta {res.extra['zeta'][j]} recorded, {zeta} from the counts"))
  if int(res.predict[j]) != p or not _close(radius, float(res.radius[j]), rtol, atol):
    out.append(Mismatch(i, f"predict {res.predict[j]} radius {res.radius[j]}; counts give "
                           f"{p} {radius}"))  # fmt: skip
  if not _close(p_low, r.get("p_lower"), rtol, atol):
    out.append(Mismatch(i, f"p_lower {r.get('p_lower')} recorded, {p_low} from the counts"))
  if int(res.extra["fallback"][j]) != int(used):
    out.append(Mismatch(i, f"fallback {res.extra['fallback'][j]}, the record says {int(used)}"))
  return out
