"""``--method ucan`` as a value (no JAX here: ``rsjax verify`` reads it)."""

from __future__ import annotations

from rsjax.claims import NOISES
from rsjax.runs.method import INIT, Method, Option, Training
from rsjax.ucan._check import check_ucan
from rsjax.ucan._noise_file import GENERATORS, NOISE_FILE

__all__ = ["METHOD"]


#: ``--method ucan``: anisotropic (mu, sigma) noise and UCAN's certified region.
METHOD = Method(
  "ucan",
  "anisotropic (mu, sigma) noise, UCAN's certified region (pattern-wise or dataset-wise sigma)",
  "rsjax.ucan._certify:UCAN",
  (
    Option(
      "ucan_sigma",
      "auto",
      f"dataset: the model directory's saved universal "
      f"{NOISE_FILE}; pattern: --sigma times the pattern; auto: dataset if saved, else "
      "pattern",
      str,
      choices=("auto", "pattern", "dataset"),
    ),
    Option(
      "ucan_pattern",
      "l2",
      "norm p of the pattern kappa ||(a, b)||_p^2 + iota",
      str,
      choices=("l1", "l2", "linf"),
    ),
    Option("ucan_kappa", 0.2, "pattern curvature kappa", float),
    Option("ucan_iota", 0.8, "pattern value iota at the centre", float, positive=True),
  ),
  check=check_ucan,
  # It scales the noise per pixel; the sound 8-bit noise has one sigma for every pixel.
  noises=tuple(n for n in NOISES if n != "gaussian_8bit"),
  multiclass=True,
  columns=("normalized_radius", "alm", "sound"),
  radius_columns={
    "normalized_radius": "R of the unit noise: a radius in the noise's whitened space, "
    "not in the input's norm",
    "alm": "ALM, the volume-equivalent radius: not a ball guarantee",
  },
  training=Training(
    "rsjax.ucan.training:train_job",
    f"anisotropic noise of --generator (--sigma is the base lambda; --lr 0.001 as UCAN), "
    f"frozen in OUT/{NOISE_FILE}",
    (
      Option("generator", None, "UCAN: the noise generator", str, GENERATORS),
      INIT,
      Option("ucan_draws", 5, "UCAN: noise draws per step", int, positive=True),
      Option(
        "allow_unsound",
        False,
        "UCAN: train the input-dependent generator (its radii are NOT a certificate)",
        bool,
      ),
    ),
  ),
)
