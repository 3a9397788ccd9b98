"""The check of dual randomized smoothing: ``rsjax verify``'s half of ``--method dual``.

Each row is derived again from its two sets of counts: the estimator's (``estimator_counts0``
selection, ``estimator_counts`` estimation, over the ``K`` sigma indices) give the chosen
index ``k*``, its bound at ``alpha_1`` and its radius ``R_g`` at the run's sigma; where the
choice is certified (bound > 1/2) the chosen classifier's counts give Cohen's class and
radius ``R_f`` at ``sigmas[k*]`` and ``alpha_2``; the row's radius is ``min(R_g, R_f)``.
Where the estimator abstains the row abstains and holds no classifier counts. ``alpha_1``
and ``alpha_2`` are the split of the run's alpha by ``--dual-alpha-split``, the sigmas those
of ``--dual-experts``; both are recomputed here, not read from the record's details.
NumPy and SciPy only.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rsjax.claims import (
  Mismatch,
  binary_radius,
  cp_lower,
  dense,
  drawn_sigma,
  split_alpha,
)

__all__ = ["check_dual", "parse_expert_models", "parse_experts"]

_HEX = frozenset("0123456789abcdef")


def parse_experts(text: str) -> tuple[tuple[float, str], ...]:
  """``"0.25:DIR,0.5:DIR"`` -> ``((0.25, "DIR"), (0.5, "DIR"))`` (``--dual-experts``): the
  sigmas in the order of the estimator's indices, each > 0 and distinct, at least two."""
  if not isinstance(text, str) or not text:
    raise ValueError("expected SIGMA:MODEL_DIR,SIGMA:MODEL_DIR,... (at least two)")
  out = []
  for part in text.split(","):
    sigma, sep, where = part.partition(":")
    try:
      s = float(sigma)
    except ValueError:
      s = math.nan
    if not sep or not where or not (math.isfinite(s) and s > 0):
      raise ValueError(f"expected SIGMA:MODEL_DIR with SIGMA > 0, got {part!r}")
    out.append((s, where))
  sigmas = [s for s, _ in out]
  if len(out) < 2 or len(set(sigmas)) != len(sigmas):
    raise ValueError(f"--dual-experts needs at least two distinct sigmas, got {sigmas}")
  return tuple(out)


def parse_expert_models(text: str) -> tuple[tuple[str, str], ...]:
  """``"FP:CONFIG,FP:CONFIG"`` -> ``(("FP", "CONFIG"), ...)`` (``dual_expert_models``): each
  expert's model fingerprint and configuration digest (lower-case hex), in order."""
  out = []
  for part in str(text).split(","):
    fp, sep, config = part.partition(":")
    if not sep or not fp or not config or not set(fp + config) <= _HEX:
      raise ValueError(f"expected FINGERPRINT:CONFIG_DIGEST (hex) per expert, got {part!r}")
    out.append((fp, config))
  return tuple(out)


def _expert_issues(cert: dict, k: int) -> list[Mismatch]:
  """Why the claim does not bind the run's ``k`` experts (``dual_expert_models``, in the
  claim) as the record's details state them (empty: it does)."""
  text = cert["settings"].get("dual_expert_models")
  if not text:
    return [Mismatch(-1, "the claim does not bind the experts (no dual_expert_models): "
                         "certified by an older rsjax; certify the run again")]  # fmt: skip
  bound = parse_expert_models(text)
  stated = [(e.get("fingerprint"), e.get("config")) for e in (cert.get("details") or {}).get(
    "experts", [])]  # fmt: skip
  if len(bound) != k or list(bound) != stated:
    return [Mismatch(-1, f"the claim binds the experts {list(bound)}, the record states "
                         f"{stated} for its {k} sigmas")]  # fmt: skip
  return []


def _estimator(r: dict, k: int, n0: int, n: int) -> tuple[np.ndarray, np.ndarray] | str:
  """The estimator's ``([K] selection, [K] estimation)`` counts of record ``r``, or why not."""
  got = []
  for field, total in (("estimator_counts_selection", n0), ("estimator_counts", n)):
    v = r.get(field)
    if not (
      isinstance(v, list)
      and len(v) == k
      and all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in v)
    ):
      return f"{field} is not a list of {k} counts"
    if sum(v) != total:
      return f"{field} sum to {sum(v)}, the run draws {total}"
    got.append(np.asarray(v, np.int64))
  return got[0], got[1]


def _settings(cert: dict) -> tuple[list[float], float, float, int, int]:
  """``(sigmas, alpha_1, alpha_2, estimator n0, estimator n)`` from the run's options."""
  opts, s = cert["settings"], cert["sampling"]
  sigmas = [sigma for sigma, _ in parse_experts(opts.get("dual_experts"))]
  share = float(opts.get("dual_alpha_split", 0.5))
  if not 0.0 < share < 1.0:
    raise ValueError(f"dual_alpha_split {share} is not in (0, 1)")
  a1, a2 = split_alpha(float(s["alpha"]), share)
  n0 = int(opts.get("dual_estimator_n0") or s["n0"])
  n = int(opts.get("dual_estimator_n") or s["n"])
  return sigmas, a1, a2, n0, n


def _row(cert: dict, r: dict, sig: tuple) -> tuple[int, int, float, float, float] | str:
  """``(k*, class, radius, R_g, p_lower)`` of record ``r`` derived again, or why not."""
  sigmas, a1, a2, g_n0, g_n = sig
  est = _estimator(r, len(sigmas), g_n0, g_n)
  if isinstance(est, str):
    return est
  k = int(np.argmax(est[0]))
  p_g = float(cp_lower(est[1][k], g_n, a1))
  chosen = k if p_g > 0.5 else -1
  if r.get("sigma_index") != chosen:
    return f"sigma_index {r.get('sigma_index')!r} recorded, the estimator's counts give {chosen}"
  noise, c = cert["noise"], int(cert["num_classes"])
  r_g = float(binary_radius(p_g, drawn_sigma(cert["sigma"]), noise, 1)) if chosen >= 0 else 0.0
  c0, c1 = dense(r.get("counts0"), c), dense(r.get("counts"), c)
  if c0 is None or c1 is None:
    return "the record's classifier counts are not counts of the run's classes"
  s = cert["sampling"]
  n0, n = int(s["n0"]), int(s["n"])
  if chosen < 0:
    if c0.any() or c1.any():
      return "the estimator abstains, yet the record holds classifier counts"
    return -1, -1, 0.0, 0.0, 0.0
  if c0.sum() != n0 or c1.sum() != n or r.get("n", n) != n:
    return f"classifier counts sum to {c0.sum()} and {c1.sum()}, the run draws {n0} and {n}"
  guess = int(np.argmax(c0))
  p_f = float(cp_lower(c1[guess], n, a2))
  if p_f < 0.5:
    return chosen, -1, 0.0, r_g, p_f
  r_f = float(binary_radius(p_f, drawn_sigma(sigmas[chosen]), noise, 1))
  return chosen, guess, min(r_g, r_f), r_g, p_f


def check_dual(
  cert: dict, res: Any, recs: dict, *, rtol: float, atol: float, **_: object
) -> list[Mismatch]:
  issues: list[Mismatch] = []
  if cert.get("noise", {}).get("name") not in ("gaussian", "gaussian_fast"):
    return [Mismatch(-1, "a dual run with non-Gaussian noise: rsjax never certifies it")]
  try:
    sig = _settings(cert)
    sigmas = sig[0]
    issues.extend(_expert_issues(cert, len(sigmas)))
  except (TypeError, ValueError, AttributeError) as e:
    return [Mismatch(-1, f"the run's dual options do not parse: {e}")]
  extra = res.extra
  for j, idx in enumerate(res.idx):
    idx = int(idx)
    r = recs.get(idx)
    got = "no certificate record for this row" if r is None else _row(cert, r, sig)
    if isinstance(got, str):
      issues.append(Mismatch(idx, got))
      continue
    k, pred, radius, r_g, p = got
    sigma = sigmas[k] if k >= 0 else 0.0
    file = {
      "predict": (int(res.predict[j]), pred),
      "radius": (float(res.radius[j]), radius),
      "sigma_index": (int(extra["sigma_index"][j]), k),
      "sigma": (float(extra["sigma"][j]), sigma),
      "estimator_radius": (float(extra["estimator_radius"][j]), r_g),
      "p_lower": (r.get("p_lower"), p),  # type: ignore[union-attr]
    }
    for name, (have, want) in file.items():
      if not isinstance(have, (int, float)) or not math.isclose(
        have, want, rel_tol=rtol, abs_tol=atol
      ):
        issues.append(Mismatch(idx, f"{name} {have!r} in the run, its counts give {want!r}"))
        break
  return issues
