"""UCAN's CERTIFY: Cohen's passes on the shifted input ``x + mu``, the normalized region."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from rsjax._certify import Certificate, Sampling, certificate_from_counts, engine_counts, run_certify
from rsjax._sampling import prepare_inputs
from rsjax.anisotropic._region import alm, isotropic_radius

__all__ = ["AnisotropicCertificate", "certify"]


@dataclasses.dataclass(frozen=True)
class AnisotropicCertificate(Certificate):
  """A :class:`rsjax.Certificate` with the anisotropic region.

  ``radius`` is the isotropic radius ``min_i sigma_i * R`` in ``norm`` (a ball
  inside the region).

  Attributes:
    normalized_radius: ``[B]`` float64 ``R``; the certified region is
      ``{delta : ||delta / sigma||_p <= R}`` (0 on abstain).
    alm: ``[B]`` float64 volume-equivalent radius ``exp(mean log sigma) * R``
      (see :func:`alm`; not a ball guarantee).
  """

  normalized_radius: np.ndarray | None = None
  alm: np.ndarray | None = None


def _per_input(v, name, x_shape, default=None) -> np.ndarray:
  """float, ``[*input_shape]`` (shared) or ``[B, *input_shape]`` -> ``[B, *input_shape]``."""
  if v is None:
    return np.full(x_shape, default, np.float32)
  arr = np.asarray(jax.device_get(v), np.float32)
  if arr.ndim == 0 or arr.shape == x_shape[1:]:
    return np.broadcast_to(arr, x_shape).copy()
  if arr.shape == x_shape:
    return arr
  raise ValueError(f"{name} must be a float, shape [*input_shape]={x_shape[1:]} or "
                   f"[B, *input_shape]={x_shape}, got shape {arr.shape}")


_UNSOUND = (
    "input_dependent=True: (mu, sigma) computed from x (UCAN's certification-wise generator) does "
    "not give a certificate: the classifier deployed at x + delta smooths with mu(x + delta), "
    "sigma(x + delta), not with the (mu, sigma) the region around x was computed for (the "
    "objection of UCAN's reviewers; see IDRS for a sound input-dependent bound and DDRS/ANCER "
    "for memory-based schemes). Pass allow_unsound=True to compute the paper's numbers anyway, "
    "labelled NOT A CERTIFICATE.")


def certify(
    key,
    apply_fn,
    params,
    x,
    *,
    sigma,
    mu=None,
    num_classes: int,
    settings: Sampling | None = None,
    ids=None,
    multiclass: bool = False,
    input_dependent: bool = False,
    allow_unsound: bool = False,
    **sampling,
) -> AnisotropicCertificate:
  """Certifies ``g(x) = argmax_c P[f(x + mu + sigma * eps) = c]`` (UCAN Theorem 3.2).

  Cohen et al.'s CERTIFY (``rsjax.run_certify``) on the shifted input ``x + mu``
  with per-dimension ``sigma``; selection and estimation keys are
  ``fold_in(key, 0)`` and ``fold_in(key, 1)`` (the key is not consumed). The
  region is centered at ``x``.

  Args:
    key: ``jax.random.key`` or int seed.
    apply_fn: ``apply_fn(params, x) -> logits``.
    params: pytree for ``apply_fn``.
    x: ``[B, *input_shape]`` inputs.
    sigma: float, ``[*input_shape]`` (shared) or ``[B, *input_shape]`` scales > 0
      (the noise is ``sigma * eps`` with ``eps`` unit base noise; fold the family's
      lambda into sigma).
    mu: None (0), float, ``[*input_shape]`` or ``[B, *input_shape]`` shift.
    num_classes: number of classes C.
    settings: an ``rsjax.Sampling``; its noise is the base noise family.
    ids: ``[B]`` dataset indices (reproducible noise per input).
    multiclass: Cohen's multiclass radius for the unit noise (Gaussian only).
    input_dependent: whether ``(mu, sigma)`` were computed from ``x``. Raises
      unless ``allow_unsound``.
    allow_unsound: compute the radii of an input-dependent generator anyway,
      labelled ``NOT A CERTIFICATE`` (``sound=False``).
    **sampling: ``rsjax.Sampling`` fields as keywords (override ``settings``).

  Returns:
    ``AnisotropicCertificate``: ``radius`` = ``min_i sigma_i * R``,
    ``normalized_radius`` = R, ``alm``.

  Raises:
    ValueError: for bad arguments, or ``input_dependent`` without ``allow_unsound``.
  """
  if input_dependent and not allow_unsound:
    raise ValueError(_UNSOUND)
  settings = Sampling.of(settings, **sampling)
  noise = settings.noise
  x_np, _, _ = prepare_inputs(x, 1.0, ids)
  sig = _per_input(sigma, "sigma", x_np.shape)
  shift = _per_input(mu, "mu", x_np.shape, default=0.0)
  if not np.all(np.isfinite(shift)):
    raise ValueError("mu contains NaN or inf values")
  x_shift, sig, ids_arr = prepare_inputs(x_np + shift, sig, ids)
  b = x_np.shape[0]
  dim = int(np.prod(x_np.shape[1:]))
  p = noise.norm
  region = (f"with prob >= 1 - {settings.alpha} per input, g(x + delta) = prediction for every "
            f"delta with ||delta / sigma||_{p[1:]} <= normalized_radius (UCAN Thm 3.2, "
            f"{noise.name} base noise, {'multiclass' if multiclass else 'binary'} "
            "Clopper-Pearson CERTIFY), for the given (mu, sigma) held fixed; radius = min(sigma) "
            f"* normalized_radius is the {p} ball inside it (Cor. 3.3); alm is a "
            "volume-equivalent radius, not a ball guarantee")
  if input_dependent:
    guarantee = ("NOT A CERTIFICATE: (mu, sigma) were computed from x (input-dependent generator), "
                 "so the deployed classifier at x + delta uses other noise; the radii are reported "
                 "only to compare with the UCAN paper. Formula used: " + region)
  else:
    guarantee = (region + "; valid for input-independent (mu, sigma): fixed patterns or "
                 "dataset-wise generators frozen after training")

  def rule(c0, c1):
    base = certificate_from_counts(c0, c1, n=settings.n, alpha=settings.alpha, scale=np.ones(b),
                                   dim=dim, noise=noise, multiclass=multiclass)
    r = base.radius  # unit-noise radius: the normalized R
    return AnisotropicCertificate(
        prediction=base.prediction, radius=isotropic_radius(r, sig), p_lower=base.p_lower,
        counts=base.counts, counts_selection=base.counts_selection, norm=p, guarantee=guarantee,
        sound=not input_dependent, normalized_radius=r, alm=alm(r, sig))

  counts = engine_counts(apply_fn, params, x_shift, sig, ids_arr, num_classes=num_classes,
                         settings=settings)
  return run_certify(key, counts, rule, settings)
