"""The check of ``--method recertify`` (``rsjax verify``'s half; NumPy and SciPy only), and
the link of a child run to its parent run.

A child run names its parent in its options, all of them part of its claim (so of its key):
``parent`` (the parent's result file), ``parent_claim`` (the parent's claim digest),
``parent_model`` (the parent's model fingerprint) and ``parent_records`` (the SHA-256 of the
parent's certificate record, ``<parent>.cert.jsonl``, when the child was certified). The
check refuses a child whose parent is missing or differs in any of them, then derives every
child row again, with the formulas written out here, from the parent's recorded counts and
the child's own disagreement counts (``rsjax.cohen._recertify`` states the bound), and the
rows of the gamma switch (option ``gamma``) from their own from-scratch counts: a row is
switched exactly where the parent's recorded counts give ``p_A_lower >= gamma``.
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

__all__ = [
  "VOTES_SUFFIX",
  "check_gamma",
  "check_recertify",
  "file_sha256",
  "link_issues",
  "parent_of",
  "read_votes",
  "records_digest",
  "replay_switched",
  "stated_alpha",
  "votes_path",
]

#: ``fallback`` column of a row the gamma switch certified from scratch.
SWITCHED = 2
#: The parent's noises the bound holds for (Gaussian, L2).
GAUSSIAN = ("gaussian", "gaussian_fast")


#: A parent's stored votes beside its result file: ``<parent>.votes.npz``
#: (``rsjax.cohen._recertify_replay``).
VOTES_SUFFIX = ".votes.npz"


def votes_path(parent: str | os.PathLike) -> str:
  """The votes file of the parent run whose result file is ``parent``."""
  return os.fspath(parent) + VOTES_SUFFIX


def file_sha256(path: str | os.PathLike) -> str:
  """The SHA-256 (hex) of a file's bytes."""
  h = hashlib.sha256()
  with open(path, "rb") as f:
    h.update(f.read())
  return h.hexdigest()


def records_digest(result_file: str | os.PathLike) -> str:
  """The SHA-256 (hex) of a run's certificate record (``<file>.cert.jsonl``), as bytes."""
  return file_sha256(record_lib.record_path(result_file))


def read_votes(path: str) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
  """``(ids [M], classes [M], n, bits [M, ceil(n / 8)])`` of a parent's stored votes
  (``rsjax.cohen._recertify_replay``).

  Raises:
    ValueError: the file is unreadable or not one row of ``n`` bits per input.
  """
  try:
    with np.load(path, allow_pickle=False) as z:
      ids, classes, n, bits = (np.asarray(z[k]) for k in ("ids", "classes", "n", "bits"))
  except (OSError, KeyError, ValueError) as e:
    raise ValueError(f"the parent's votes {path!r} cannot be read: {e}") from None
  n = int(n)
  if ids.ndim != 1 or classes.shape != ids.shape or bits.shape != (len(ids), -(-n // 8)):
    raise ValueError(f"the parent's votes {path!r} are not one row of bits per input")
  return ids.astype(np.int64), classes.astype(np.int64), n, bits


def stated_alpha(parent_alpha: float, alpha: float, fallback: bool) -> float:
  """The level each child row claims: ``alpha_1 + alpha_2`` (+ ``alpha_1`` with fallback)."""
  return float(parent_alpha) + float(alpha) + (float(parent_alpha) if fallback else 0.0)


def check_gamma(gamma: Any) -> float:
  """``gamma`` as a float in (1/2, 1] (the gamma switch's threshold on the parent's bound).

  Raises:
    ValueError: another value or type.
  """
  if isinstance(gamma, bool) or not isinstance(gamma, (int, float)):
    raise ValueError(f"gamma must be a number in (0.5, 1], got {gamma!r}")
  g = float(gamma)
  if not 0.5 < g <= 1.0:
    raise ValueError(f"gamma must be in (0.5, 1], got {g:g}")
  return g


def replay_switched(share, gamma: float) -> np.ndarray:
  """``[b]`` bool: the rows a replayed child (option ``replay``) certifies from scratch: the
  parent's selection share of ``c_A`` (``counts0[c_A] / n0``) is at least ``gamma`` (less
  1e-12 for the share's rounding; ``rsjax.cohen._recertify_replay``)."""
  return np.asarray(share, np.float64) >= float(gamma) - 1e-12


def parse_gamma(text: str) -> float:
  """``--gamma``'s value (a number in (1/2, 1])."""
  try:
    value = float(text)
  except ValueError:
    raise ValueError(f"gamma must be a number in (0.5, 1], got {text!r}") from None
  return check_gamma(value)


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
  if parent.sampling.noise not in GAUSSIAN or parent.sampling.noise != noise:
    out.append(f"the parent's noise {parent.sampling.noise} is not the child's {noise}")
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
  n0, n, a1, c = s.n0, s.n, s.alpha, parent.data.num_classes
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
  return _scratch_row(fb, parent, sigma, n0=s.n0, n=s.n, a1=s.alpha)


def _scratch_row(
  fb: Any, parent: RunSpec, sigma: float, *, n0: int, n: int, a1: float
) -> tuple[int, float, float] | None:
  """``(predict, radius, p_lower)`` of a row certified from scratch by Cohen's CERTIFY at
  ``n0``, ``n`` and level ``a1`` (the parent's classes and radius), or None when its record
  is not one."""
  c = parent.data.num_classes
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
  a1, n, a2 = parent.sampling.alpha, int(s["n"]), float(s["alpha"])
  fallback = bool(opts.get("fallback"))
  try:
    gamma = None if opts.get("gamma") is None else check_gamma(opts["gamma"])
  except ValueError as e:
    return [Mismatch(-1, str(e))]
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
  if opts.get("replay") is None:
    switch = (pred != -1) & (pa >= gamma) if gamma is not None else np.zeros(len(idx), bool)
  else:
    votes, why = _votes_issues(parent, str(opts["parent"]), opts["replay"], precs)
    if why:
      return issues + [Mismatch(-1, why)]
    issues.extend(_replay_issues(votes, recs, idx, n))
    share = _selection_share(parent, precs, idx)
    switch = replay_switched(share, gamma) if gamma is not None else np.zeros(len(idx), bool)
  for j, i in enumerate(idx):
    switched = bool(valid[j] and switch[j])
    if switched:
      issues.extend(_switched_issues(res, j, i, recs.get(i), parent, n0=int(s["n0"]), n=n,
                                     a2=a2, sigma=float(cert["sigma"]), rtol=rtol, atol=atol))  # fmt: skip
      continue
    issues.extend(_row_issues(res, j, i, recs.get(i), parent, valid[j], pred[j], pa[j], pb[j],
                              n=n, a2=a2, fallback=fallback, sigma=float(cert["sigma"]),
                              rtol=rtol, atol=atol))  # fmt: skip
  return issues


def _selection_share(parent: RunSpec, recs: dict, idx: list[int]) -> np.ndarray:
  """``[b]`` the parent's selection share of its selected class (``counts0[c_A] / n0``) of
  rows ``idx`` (0 where the record has none)."""
  c = parent.data.num_classes
  out = np.zeros(len(idx))
  for j, i in enumerate(idx):
    c0 = dense((recs.get(int(i)) or {}).get("counts0"), c)
    if c0 is not None and c0.sum() > 0:
      out[j] = c0.max() / c0.sum()
  return out


def _votes_issues(parent: RunSpec, path: str, digest: Any, precs: dict) -> tuple[Any, str]:
  """``(votes, why)``: the parent's stored votes of a replayed child (``{id: (c_A, bits [N]
  bool)}``) once they are the file the child names and add up to the parent's recorded counts
  of ``c_A``; else ``why`` they are not (``rsjax.cohen._recertify_replay``)."""
  if parent.multiclass:
    return None, "a replayed child of a multiclass parent (the votes test its class only)"
  vp = votes_path(path)
  try:
    ids, classes, n, bits = read_votes(vp)
    same = file_sha256(vp) == digest
  except (OSError, ValueError) as e:
    return None, str(e) if isinstance(e, ValueError) else f"the parent's votes {vp!r}: {e}"
  if not same:
    return None, f"the parent's votes {vp!r} are not the ones the child was certified from"
  c = parent.data.num_classes
  if n != parent.sampling.n:
    return None, f"the parent's votes {vp!r} are not {parent.sampling.n} bits an input"
  votes = {}
  for i, k, b in zip(ids.tolist(), classes.tolist(), bits, strict=True):
    r = precs.get(int(i)) or {}
    c0, c1 = dense(r.get("counts0"), c), dense(r.get("counts"), c)
    v = np.unpackbits(b, count=n, bitorder="little").astype(bool)
    if c0 is None or c1 is None or int(np.argmax(c0)) != k or int(v.sum()) != int(c1[k]):
      return None, f"the parent's votes of input {i} are not its recorded counts"
    votes[int(i)] = (k, v)
  return votes, ""


def _replay_issues(votes: dict, recs: dict, idx: list[int], n: int) -> list[Mismatch]:
  """A replayed row's disagreement count is at most the parent's votes for ``c_A`` among
  the samples it replayed (the first ``n``)."""
  out = []
  for i in idx:
    d = dense((recs.get(i) or {}).get("counts"), 2)
    if i not in votes:
      out.append(Mismatch(i, "the parent's votes hold no row of this input"))
    elif d is not None and d.sum() == n and d[1] > int(votes[i][1][:n].sum()):
      out.append(Mismatch(i, f"{d[1]} disagreements where the parent voted c_A "
                             f"{int(votes[i][1][:n].sum())} times"))  # fmt: skip
  return out


def _switched_issues(res, j, i, r, parent, *, n0, n, a2, sigma, rtol, atol):
  """The mismatches of a row the gamma switch certified from scratch (at the child's ``n0``,
  ``n`` and ``alpha_1 + alpha_2``): no disagreement samples, its own counts."""
  if r is None:
    return [Mismatch(i, "no certificate record for this row")]
  d = dense(r.get("counts"), 2)
  if d is None or d.sum() != 0 or r.get("counts0") is not None or r.get("fallback") is not None:
    return [Mismatch(i, "a switched row (parent p_A_lower >= gamma) records disagreement samples")]
  got = _scratch_row(r.get("switched"), parent, sigma, n0=n0, n=n, a1=parent.sampling.alpha + a2)
  if got is None:
    return [Mismatch(i, "a switched row (parent p_A_lower >= gamma) has no from-scratch counts")]
  p, radius, p_low = got
  out = []
  if not _close(0.0, r.get("zeta"), rtol, atol) or float(res.extra["zeta"][j]) != 0.0:
    out.append(Mismatch(i, f"zeta {res.extra['zeta'][j]} recorded on a switched row"))
  out += _certificate_issues(res, j, i, r, (p, radius, p_low), rtol, atol)
  if int(res.extra["fallback"][j]) != SWITCHED:
    out.append(Mismatch(i, f"fallback {res.extra['fallback'][j]}, the switch says {SWITCHED}"))
  return out


def _certificate_issues(res, j, i, r, derived, rtol: float, atol: float) -> list[Mismatch]:
  """Row ``j``'s prediction, radius and recorded ``p_lower`` against ``derived`` (``(predict,
  radius, p_lower)`` from its counts)."""
  p, radius, p_low = derived
  out = []
  if int(res.predict[j]) != p or not _close(radius, float(res.radius[j]), rtol, atol):
    out.append(Mismatch(i, f"predict {res.predict[j]} radius {res.radius[j]}; counts give "
                           f"{p} {radius}"))  # fmt: skip
  if not _close(p_low, r.get("p_lower"), rtol, atol):
    out.append(Mismatch(i, f"p_lower {r.get('p_lower')} recorded, {p_low} from the counts"))
  return out


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
  if r.get("switched") is not None:
    return [Mismatch(i, "a switched record on a row the switch leaves (parent p_A_lower < gamma)")]
  out = []
  if not _close(zeta, r.get("zeta"), rtol, atol) or not _close(zeta, res.extra["zeta"][j], rtol,
                                                                atol):  # fmt: skip
    out.append(Mismatch(i, f"zeta {res.extra['zeta'][j]} recorded, {zeta} from the counts"))
  out += _certificate_issues(res, j, i, r, (p, radius, p_low), rtol, atol)
  if int(res.extra["fallback"][j]) != int(used):
    out.append(Mismatch(i, f"fallback {res.extra['fallback'][j]}, the record says {int(used)}"))
  return out
