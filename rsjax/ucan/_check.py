"""The check of UCAN's frozen anisotropic noise: ``rsjax verify``'s half of the method."""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from rsjax.claims import Mismatch, VerifyError, cohen_certificate, compare, read_rows
from rsjax.runs.record import input_fingerprint
from rsjax.ucan._noise_file import NOISE_FILE, noise_file_hash


def _ucan_pattern(shape, sigma: float, pattern: str, kappa: float, iota: float) -> np.ndarray:
  """UCAN's pattern scales ``sigma * (kappa ||(a, b)||_p^2 + iota)``, (a, b) in [-1, 1]^2 (float32)."""
  h, w = int(shape[0]), int(shape[1])
  a = np.linspace(-1.0, 1.0, h) if h > 1 else np.zeros(1)
  b = np.linspace(-1.0, 1.0, w) if w > 1 else np.zeros(1)
  aa, bb = np.abs(a)[:, None], np.abs(b)[None, :]
  if pattern == "linf":
    r2 = np.maximum(aa, bb) ** 2
  elif pattern == "l1":
    r2 = (aa + bb) ** 2
  elif pattern == "l2":
    r2 = aa**2 + bb**2
  else:
    raise VerifyError(f"ucan run with unknown pattern {pattern!r}")
  scales = (kappa * r2 + iota).astype(np.float32)
  if len(shape) == 3:
    scales = np.repeat(scales[:, :, None], int(shape[2]), axis=2)
  return scales * np.float32(sigma)


def _dataset_scales_issues(cert: dict, d: dict, s_min: float, s_gmean: float) -> list[Mismatch]:
  """UCAN's dataset-wise scales against their file beside the run (``ucan_noise.npz`` in the
  result file's directory), bound by the hash the record states; what cannot be read here is
  said in ``cert["unchecked"]``."""
  path = cert.get("path")
  want = d.get("noise_file")
  where = os.path.join(os.path.dirname(os.path.abspath(path)), NOISE_FILE) if path else None
  if want is None:
    cert.setdefault("unchecked", []).append(
      "UCAN's dataset-wise scales (the record binds no scales file: certify it again)"
    )
    return []
  if where is None or not os.path.exists(where):
    cert.setdefault("unchecked", []).append(
      f"UCAN's dataset-wise scales (no {NOISE_FILE} beside the run; copy the model "
      "directory's file there to check them)"
    )
    return []
  got = noise_file_hash(where)
  if got != want:
    return [Mismatch(-1, f"{where} has hash {got}, the run's scales file {want}")]
  with np.load(where, allow_pickle=False) as f:
    sig, mu = np.asarray(f["sigma"], np.float32), np.asarray(f["mu"], np.float32)
  issues = []
  if input_fingerprint(sig) != d.get("sigma_fingerprint") or input_fingerprint(mu) != d.get(
    "mu_fingerprint"
  ):
    issues.append(Mismatch(-1, f"the (mu, sigma) fingerprints in the details are not {where}'s"))
  return issues + _scales_issues(s_min, s_gmean, sig, NOISE_FILE)


def _scales_issues(s_min: float, s_gmean: float, scales: np.ndarray, what: str) -> list[Mismatch]:
  """A mismatch where the recorded minimum or geometric mean of the scales is not that of
  ``scales`` (``what``: where they come from), else none."""
  want_min = float(scales.min())
  want_gmean = float(np.exp(np.mean(np.log(scales.astype(np.float64)))))
  if math.isclose(s_min, want_min, rel_tol=1e-6) and math.isclose(
    s_gmean, want_gmean, rel_tol=1e-6
  ):
    return []
  return [
    Mismatch(
      -1,
      f"recorded sigma min {s_min!r} / geometric mean {s_gmean!r} are not those of "
      f"{what} ({want_min!r}, {want_gmean!r})",
    )
  ]


#: The sources of the scales each ``--ucan-sigma`` gives (``details.source``).
_SOURCES = {"pattern": ("pattern",), "dataset": ("dataset",), "auto": ("pattern", "dataset")}


def check_ucan(
  cert: dict, res: Any, recs: dict, *, rtol: float, atol: float, **_: object
) -> list[Mismatch]:
  """UCAN with frozen ``(mu, sigma)`` (``rsjax.ucan.certify``): Cohen's CERTIFY of the
  unit noise gives the normalized radius R; radius = min(sigma) R, alm = geomean(sigma) R."""
  d = cert.get("details")
  if not d or "sigma_min" not in d:
    raise VerifyError(
      "ucan run without its (mu, sigma) in the certificate record (details): "
      "certify it again with this rsjax"
    )
  issues: list[Mismatch] = []
  s_min, s_gmean = float(d["sigma_min"]), float(d["sigma_gmean"])
  if not (s_min > 0 and s_gmean >= s_min):
    return [
      Mismatch(-1, f"recorded sigma min {s_min!r}, geometric mean {s_gmean!r} are not scales")
    ]
  source, asked = d.get("source"), (cert.get("settings") or {}).get("ucan_sigma", "auto")
  if source not in _SOURCES.get(asked, ()):  # scales no source the options allow gives
    return [Mismatch(-1, f"details.source {source!r} is not what --ucan-sigma {asked} gives")]
  if source == "pattern":
    opts = cert.get("settings") or {}
    try:
      claimed = (float(d["sigma"]), d["pattern"], float(d["kappa"]), float(d["iota"]))
      declared = (
        float(cert["sigma"]),
        opts.get("ucan_pattern"),
        float(opts["ucan_kappa"]),
        float(opts["ucan_iota"]),
      )
    except (KeyError, TypeError, ValueError):
      raise VerifyError(
        "ucan run without its pattern settings (sigma, pattern, kappa, iota)"
      ) from None
    if claimed != declared:
      return [
        Mismatch(
          -1,
          f"the pattern (sigma, p, kappa, iota) {claimed} in the details "
          f"is not the run's {declared}",
        )
      ]
    scales = _ucan_pattern(
      cert["input_shape"], float(d["sigma"]), d["pattern"], float(d["kappa"]), float(d["iota"])
    )
    issues.extend(_scales_issues(s_min, s_gmean, scales, "the pattern"))
  else:
    issues.extend(_dataset_scales_issues(cert, d, s_min, s_gmean))
  if issues:
    return issues
  rows = read_rows(cert, res, recs, issues)
  predict, r_norm, p = cohen_certificate(cert, rows, 1.0)
  for column, scale in (("normalized_radius", 1.0), ("alm", s_gmean)):
    if column not in res.extra:
      raise VerifyError(f"ucan run without its {column!r} column")
    before = len(issues)
    compare(
      res, rows, predict, r_norm * scale, issues, rtol=rtol, atol=atol, columns=("predict", column)
    )
    if len(issues) > before:
      return issues
  compare(res, rows, predict, r_norm * s_min, issues, rtol=rtol, atol=atol, p_lower=p)
  if "sound" not in res.extra:
    raise VerifyError("ucan run without its 'sound' column")
  for j in np.flatnonzero(np.asarray(res.extra["sound"], np.float64) != 1):
    issues.append(Mismatch(int(res.idx[j]), "sound 0: the row is no certificate"))
  return issues
