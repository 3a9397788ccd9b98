"""The plan of ``--method ucan``: frozen anisotropic (mu, sigma) noise, UCAN's certified region."""

from __future__ import annotations

import os

import numpy as np

from rsjax import models, record
from rsjax.anisotropic._certify import UCAN, AnisotropicCertificate
from rsjax.anisotropic._generators import FrozenNoise, pattern_sigma
from rsjax.anisotropic._noise_file import NOISE_FILE, load_universal_noise, noise_file_hash
from rsjax.cohen._certify import certify
from rsjax.method import Context, Plan


def _trained_unsound(workdir) -> bool:
  """Whether the model directory's config marks its training noise as not sound."""
  if not workdir or not os.path.exists(os.path.join(os.fspath(workdir), models.CONFIG_FILE)):
    return False
  return models.read_config(workdir).get("sound", True) is False


def build(
  ctx: Context, *, ucan_sigma: str, ucan_pattern: str, ucan_kappa: float, ucan_iota: float
) -> Plan:
  """Refuses what UCAN cannot certify, else the plan (``rsjax.method.Method.build``)."""
  shape = tuple(ctx.dataset.input_shape)
  if ucan_sigma == "auto" and _trained_unsound(ctx.workdir):
    raise ValueError(
      "the model was trained with UCAN's input-dependent generator, which gives no "
      "certificate (rsjax.anisotropic.certify_input_dependent reports its unsound "
      "numbers); pass --ucan-sigma pattern to certify the classifier with pattern-wise "
      "noise instead"
    )
  noise = load_universal_noise(ctx.workdir) if ucan_sigma != "pattern" else None
  if ucan_sigma == "dataset" and noise is None:
    raise ValueError(
      f"--ucan-sigma dataset needs the universal generator's {NOISE_FILE} in the "
      "model directory (rsjax.anisotropic.save_universal_noise); use --ucan-sigma pattern"
    )
  if noise is not None:
    if noise.sigma.shape != shape:
      raise ValueError(
        f"{NOISE_FILE} holds sigma of shape {noise.sigma.shape}, the dataset's inputs are {shape}"
      )
    source = "dataset"
    what = (
      f"dataset-wise (mu, sigma) from {NOISE_FILE} (sigma in "
      f"[{noise.sigma.min():.4g}, {noise.sigma.max():.4g}])"
    )
  else:
    noise = FrozenNoise(
      ctx.sigma * pattern_sigma(shape, pattern=ucan_pattern, kappa=ucan_kappa, iota=ucan_iota)
    )
    source = "pattern"
    what = (
      f"pattern-wise sigma = {ctx.sigma} * ({ucan_kappa} ||(a, b)||_{ucan_pattern[1:]}^2 + "
      f"{ucan_iota}) in [{noise.sigma.min():.4g}, {noise.sigma.max():.4g}]"
    )

  def fn(x, ids):
    return certify(
      ctx.key,
      ctx.apply_fn,
      ctx.params,
      x,
      sigma=noise,
      ids=ids,
      certifier=UCAN(multiclass=ctx.multiclass),
      num_classes=ctx.dataset.num_classes,
      settings=ctx.settings,
    )

  details = _details(
    noise, source, sigma=ctx.sigma, pattern=ucan_pattern, kappa=ucan_kappa, iota=ucan_iota
  )
  if source == "dataset":  # the scales' file, bound by its hash (verify reads it beside the run)
    details["noise_file"] = noise_file_hash(os.path.join(os.fspath(ctx.workdir), NOISE_FILE))
  return Plan(
    fn,
    AnisotropicCertificate.columns,
    describe=f"UCAN, {what}; radius = min(sigma) * normalized_radius",
    details=details,
  )


def _details(noise: FrozenNoise, source: str, **pattern) -> dict:
  """What ``rsjax verify`` needs of UCAN's frozen ``(mu, sigma)``: the scales' minimum
  (radius = min(sigma) R) and geometric mean (alm), fingerprints of both arrays, and
  the pattern's parameters when sigma is a pattern."""
  sig = np.asarray(noise.sigma, np.float32)
  mu = np.zeros_like(sig) if noise.mu is None else np.asarray(noise.mu, np.float32)
  out = {
    "source": source,
    "sigma_min": float(sig.min()),
    "sigma_gmean": float(np.exp(np.mean(np.log(sig.astype(np.float64))))),
    "sigma_fingerprint": record.input_fingerprint(sig),
    "mu_fingerprint": record.input_fingerprint(mu),
  }
  if source == "pattern":
    out.update(pattern)
  return out
