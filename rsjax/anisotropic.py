"""Anisotropic smoothing (UCAN, Hong et al.): certified regions of ``x + mu + sigma * eps``.

With per-dimension scales ``sigma`` (all > 0) and a shift ``mu``, the smoothed
classifier ``g(x) = argmax_c P[f(x + mu + sigma * eps) = c]`` (``eps`` unit-scale
base noise) keeps its prediction for every ``delta`` with

    ``||delta / sigma||_p <= R``                     (UCAN Theorem 3.2)

where ``R`` is the isotropic radius of the *unit* base noise (``sigma = 1``) for
the same bound on the top-class probability. Proof: with ``h(u) = f(sigma * u + mu)``
and ``u = x / sigma`` the problem is isotropic. The shift ``mu`` moves the clean
and the perturbed point alike, so the region is centered at ``x`` and does not
depend on ``mu``. The region contains the ball of radius ``min_i sigma_i * R``
(Corollary 3.3), which is what ``AnisotropicCertificate.radius`` reports.

Soundness. The region holds for a ``(mu, sigma)`` that does not depend on the
input: fixed patterns (:func:`pattern_sigma`) or dataset-wise vectors
(:class:`UniversalNoise`) frozen after training. UCAN's certification-wise
generator computes ``mu(x), sigma(x)`` from the input; the classifier deployed at
``x + delta`` then smooths with ``mu(x + delta), sigma(x + delta)``, which the
region around ``x`` says nothing about (the objection of the reviewers, citing
DDRS, ANCER and IDRS: input-dependent noise needs a memory or an IDRS-style
bound). :func:`certify` refuses that case unless ``allow_unsound=True`` and then
labels the result ``NOT A CERTIFICATE``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from rsjax import noise as noise_lib
from rsjax import stats
from rsjax._certify import Certificate, _check_alpha, certificate_from_counts
from rsjax._sampling import _check_positive_int, as_key, prepare_inputs, sample_counts

__all__ = [
    "AnisotropicCertificate",
    "UniversalNoise",
    "alm",
    "certify",
    "in_certified_region",
    "isotropic_radius",
    "normalized_radius",
    "pattern_sigma",
    "universal_loss",
]

_ORD = {"l1": 1, "l2": 2, "linf": np.inf}


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
    sound: False when ``(mu, sigma)`` came from the input (``input_dependent``):
      then nothing here is a certificate.
  """

  normalized_radius: np.ndarray | None = None
  alm: np.ndarray | None = None
  sound: bool = True


def normalized_radius(p_lower, *, noise=None, dim: int | None = None) -> np.ndarray:
  """The isotropic radius ``R`` of the unit-scale base noise (host, float64).

  Args:
    p_lower: ``[B]`` lower bounds on the top-class probability.
    noise: base noise family (default Gaussian, L2).
    dim: input dimension, needed by the Linf radius of uniform noise.

  Returns:
    ``[B]`` float64 ``R`` (0 where ``p_lower <= 1/2``).
  """
  noise = noise_lib.get_noise(noise)
  if dim is None:
    if isinstance(noise, noise_lib.Uniform) and noise.norm == "linf":
      raise ValueError("dim is required for uniform noise with the linf norm")
    dim = 1
  p = np.asarray(p_lower, np.float64)
  safe = np.where(p > 0.5, p, 0.75)
  return np.where(p > 0.5, np.asarray(noise.radius(safe, 1.0, dim), np.float64), 0.0)


def _check_norm(norm: str) -> float:
  if norm not in _ORD:
    raise ValueError(f"norm must be one of {sorted(_ORD)}, got {norm!r}")
  return _ORD[norm]


def in_certified_region(delta, sigma, radius, norm: str = "l2") -> np.ndarray:
  """Whether ``||delta / sigma||_p <= radius`` (host, float64).

  Args:
    delta: ``[B, *input_shape]`` perturbations.
    sigma: ``[*input_shape]`` or ``[B, *input_shape]`` noise scales (> 0).
    radius: float or ``[B]`` normalized radii ``R``.
    norm: ``"l2"``, ``"l1"`` or ``"linf"``.

  Returns:
    ``[B]`` bool.
  """
  order = _check_norm(norm)
  delta = np.asarray(delta, np.float64)
  if delta.ndim < 2:
    raise ValueError(f"delta must have shape [B, *input_shape], got {delta.shape}")
  sig = np.broadcast_to(np.asarray(sigma, np.float64), delta.shape)
  u = (delta / sig).reshape(delta.shape[0], -1)
  return np.linalg.norm(u, ord=order, axis=1) <= np.asarray(radius, np.float64)


def _reduce_sigma(r, sigma, fn) -> np.ndarray:
  r = np.asarray(r, np.float64)
  sig = np.asarray(sigma, np.float64)
  if np.any(~np.isfinite(sig)) or np.any(sig <= 0):
    raise ValueError("sigma must be finite and > 0 everywhere")
  if r.ndim == 0:
    return fn(sig.reshape(-1)) * r
  if r.ndim != 1 or sig.ndim < 2 or sig.shape[0] not in (1, r.shape[0]):
    raise ValueError(f"for radius of shape [B]={r.shape}, sigma must have shape [B or 1, "
                     f"*input_shape], got {sig.shape}")
  return fn(sig.reshape(sig.shape[0], -1), axis=1) * r


def isotropic_radius(radius, sigma) -> np.ndarray:
  """``min_i sigma_i * R``: the ball inside the region (UCAN Corollary 3.3, sound).

  Args:
    radius: float, or ``[B]`` normalized radii ``R``.
    sigma: for float ``radius`` any shape; for ``[B]`` radii
      ``[B or 1, *input_shape]``.

  Returns:
    float64, shaped like ``radius``.
  """
  return _reduce_sigma(radius, sigma, np.min)


def alm(radius, sigma) -> np.ndarray:
  """UCAN's "alternative Lebesgue measure" ``exp(mean_i log sigma_i) * R``.

  The radius of the isotropic ball with the volume of the region
  ``{delta : ||delta / sigma||_p <= R}``. It is **not** a ball guarantee: the
  region is thin along small ``sigma_i``, and points at distance less than the
  ALM can change the prediction. Reviewers of UCAN disputed whether it measures
  robustness at all; it is reported only to compare with the paper. Arguments as
  :func:`isotropic_radius`.
  """
  return _reduce_sigma(radius, sigma, lambda s, axis=None: np.exp(np.mean(np.log(s), axis=axis)))


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
    noise=None,
    n0: int = 100,
    n: int = 100_000,
    alpha: float = 0.001,
    batch_size: int = 1000,
    ids=None,
    input_dependent: bool = False,
    allow_unsound: bool = False,
    multiclass: bool = False,
    compute_dtype=None,
) -> AnisotropicCertificate:
  """Certifies ``g(x) = argmax_c P[f(x + mu + sigma * eps) = c]`` (UCAN Theorem 3.2).

  Cohen et al.'s CERTIFY on the shifted input ``x + mu`` with per-dimension
  ``sigma``; selection and estimation keys are ``fold_in(key, 0)`` and
  ``fold_in(key, 1)`` (the key is not consumed). The region is centered at ``x``.

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
    noise: base noise family (default Gaussian, L2).
    n0: selection samples.
    n: estimation samples.
    alpha: failure probability per input.
    batch_size: forward passes per step.
    ids: ``[B]`` dataset indices (reproducible noise per input).
    input_dependent: whether ``(mu, sigma)`` were computed from ``x``. Raises
      unless ``allow_unsound``.
    allow_unsound: compute the radii of an input-dependent generator anyway,
      labelled ``NOT A CERTIFICATE`` (``sound=False``).
    multiclass: Cohen's multiclass radius for the unit noise (Gaussian only).
    compute_dtype: optional reduced precision for the classifier.

  Returns:
    ``AnisotropicCertificate``: ``radius`` = ``min_i sigma_i * R``,
    ``normalized_radius`` = R, ``alm``.

  Raises:
    ValueError: for bad arguments, or ``input_dependent`` without ``allow_unsound``.
  """
  if input_dependent and not allow_unsound:
    raise ValueError(_UNSOUND)
  alpha = _check_alpha(alpha)
  n0 = _check_positive_int("n0", n0)
  n = _check_positive_int("n", n)
  stats.check_sample_size(n, alpha)
  noise = noise_lib.get_noise(noise)
  x_np, _, _ = prepare_inputs(x, 1.0, ids)
  sig = _per_input(sigma, "sigma", x_np.shape)
  shift = _per_input(mu, "mu", x_np.shape, default=0.0)
  if not np.all(np.isfinite(shift)):
    raise ValueError("mu contains NaN or inf values")
  x_shift, sig, ids_arr = prepare_inputs(x_np + shift, sig, ids)
  key = as_key(key)
  k_sel, k_est = jax.random.fold_in(key, 0), jax.random.fold_in(key, 1)
  kw = dict(sigma=sig, num_classes=num_classes, batch_size=batch_size, ids=ids_arr, noise=noise,
            compute_dtype=compute_dtype)
  c0 = np.asarray(sample_counts(k_sel, apply_fn, params, x_shift, num=n0, **kw))
  c1 = np.asarray(sample_counts(k_est, apply_fn, params, x_shift, num=n, **kw))
  b = x_np.shape[0]
  dim = int(np.prod(x_np.shape[1:]))
  base = certificate_from_counts(c0, c1, n=n, alpha=alpha, scale=np.ones(b), dim=dim, noise=noise,
                                 multiclass=multiclass)
  r = base.radius  # unit-noise radius: the normalized R
  iso = isotropic_radius(r, sig)
  vol = alm(r, sig)
  p = noise.norm
  region = (f"with prob >= 1 - {alpha} per input, g(x + delta) = prediction for every delta with "
            f"||delta / sigma||_{p[1:]} <= normalized_radius (UCAN Thm 3.2, {noise.name} base noise, "
            f"{'multiclass' if multiclass else 'binary'} Clopper-Pearson CERTIFY), for the given "
            f"(mu, sigma) held fixed; radius = min(sigma) * normalized_radius is the {p} ball inside "
            "it (Cor. 3.3); alm is a volume-equivalent radius, not a ball guarantee")
  if input_dependent:
    guarantee = ("NOT A CERTIFICATE: (mu, sigma) were computed from x (input-dependent generator), "
                 "so the deployed classifier at x + delta uses other noise; the radii are reported "
                 "only to compare with the UCAN paper. Formula used: " + region)
  else:
    guarantee = (region + "; valid for input-independent (mu, sigma): fixed patterns or "
                 "dataset-wise generators frozen after training")
  return AnisotropicCertificate(
      prediction=base.prediction, radius=iso, p_lower=base.p_lower, counts=base.counts,
      counts_selection=base.counts_selection, norm=p, guarantee=guarantee,
      normalized_radius=r, alm=vol, sound=not input_dependent)


# ----------------------------------------------------------------------------- generators


def pattern_sigma(input_shape, *, pattern: str = "l2", kappa: float = 0.2,
                  iota: float = 0.8) -> np.ndarray:
  """UCAN's fixed pattern-wise scales ``P(a, b) = kappa * ||(a, b)||_p^2 + iota``.

  ``(a, b)`` are pixel coordinates normalized to ``[-1, 1]`` (centre 0). The
  authors' code divides by ``(SIZE - 1) * 2`` instead, so its coordinates span
  ``[-1/4, 1/4]`` and P barely varies (``[0.80, 0.825]`` for l2); that bug is
  fixed here. The map is shared across channels.

  Args:
    input_shape: ``(H, W)`` or ``(H, W, C)``.
    pattern: ``"l2"``, ``"l1"`` or ``"linf"`` (the p of the coordinate norm).
    kappa: curvature.
    iota: value at the centre.

  Returns:
    float32 ``input_shape`` array of scales (multiply by the base lambda).
  """
  order = _ORD.get(pattern)
  if order is None:
    raise ValueError(f"pattern must be one of {sorted(_ORD)}, got {pattern!r}")
  shape = tuple(int(s) for s in input_shape)
  if len(shape) not in (2, 3) or min(shape) < 1:
    raise ValueError(f"input_shape must be (H, W) or (H, W, C), got {input_shape!r}")

  def coords(size):
    return np.zeros(1) if size == 1 else np.linspace(-1.0, 1.0, size)

  a, b = np.meshgrid(coords(shape[0]), coords(shape[1]), indexing="ij")
  if order == np.inf:
    r = np.maximum(np.abs(a), np.abs(b))
  else:
    r = (np.abs(a) ** order + np.abs(b) ** order) ** (1.0 / order)
  p = kappa * r ** 2 + iota
  if not np.all(p > 0):
    raise ValueError(f"kappa={kappa!r}, iota={iota!r} give scales <= 0")
  if len(shape) == 3:
    p = np.repeat(p[:, :, None], shape[2], axis=2)
  return p.astype(np.float32)


@dataclasses.dataclass(frozen=True)
class UniversalNoise:
  """Dataset-wise ("universal") ``(mu, sigma)``: free vectors through tanh.

  ``mu = tanh(a)``, ``sigma = |tanh(b)| * scale``. UCAN's generator is an MLP on
  the constant input 1 whose training-mode BatchNorm makes it a learned constant
  vector, so this is the same family without the MLP (an assumption, see
  METHODS). Certify with the *frozen* values ``noise(params)``.

  Attributes:
    input_shape: shape of one input.
    scale: the factor ``s`` on sigma.
  """

  input_shape: tuple[int, ...]
  scale: float = 1.0

  def init(self, *, mu0: float = 0.0, sigma0: float = 0.5) -> dict:
    """Params giving ``mu = mu0`` and ``sigma = sigma0`` everywhere."""
    if not -1.0 < mu0 < 1.0:
      raise ValueError(f"mu0 must lie in (-1, 1), got {mu0!r}")
    if not 0.0 < sigma0 < self.scale:
      raise ValueError(f"sigma0 must lie in (0, scale={self.scale}), got {sigma0!r}")
    shape = tuple(self.input_shape)
    return {"a": jnp.full(shape, np.arctanh(mu0), jnp.float32),
            "b": jnp.full(shape, np.arctanh(sigma0 / self.scale), jnp.float32)}

  def __call__(self, params) -> tuple[jax.Array, jax.Array]:
    """Returns ``(mu, sigma)``, each ``input_shape``."""
    return jnp.tanh(params["a"]), jnp.abs(jnp.tanh(params["b"])) * self.scale


def universal_loss(logits_fn, x, y, eps, *, mu, sigma, weight: float = 5.0) -> jax.Array:
  """UCAN's dataset-wise loss ``sum_j CE(f(x + mu + eps_j * sigma), y) - weight * sum_j min|sigma|``.

  Args:
    logits_fn: ``logits_fn(x) -> [B, C]`` logits.
    x: ``[B, *input_shape]`` inputs.
    y: ``[B]`` int labels.
    eps: ``[m, B, *input_shape]`` base noise draws (already scaled by lambda;
      the authors use m = 5).
    mu: ``input_shape`` shift.
    sigma: ``input_shape`` scales.
    weight: the factor on the sigma term (5 in the authors' code).

  Returns:
    Scalar loss (CE averaged over the batch, summed over draws).
  """

  def ce(e):
    logits = logits_fn(x + mu + e * sigma)
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=-1))

  m = eps.shape[0]
  total_ce = jnp.sum(jax.vmap(ce)(eps))
  return total_ce - weight * m * jnp.min(jnp.abs(sigma))
