"""Cohen et al.'s certificate for many inputs at once: the one-sided
Clopper-Pearson bound of the top class's count (or Cohen's multiclass bounds)
and the radius of the noise (:func:`certificate_from_counts`), as the driver's
certificate rule (:class:`CohenRule`), and what Cohen's CERTIFY supplies to the
driver (:func:`cohen_passes`).

The certificate is computed on the host in float64 (``rsjax.stats``); the
driver that runs the rule is ``rsjax.engine.driver.run_certify``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from jax.typing import ArrayLike

from rsjax import noise as noise_lib
from rsjax import stats
from rsjax.engine.counts import ApplyFn, prepare_inputs
from rsjax.engine.driver import ABSTAIN, Certificate, EngineCounts, Sampling
from rsjax.util import PyTree, check_alpha, scale_per_input

__all__ = ["CohenRule", "certificate_from_counts", "cohen_passes", "cohen_rule"]


def certificate_from_counts(
  counts_selection: ArrayLike,
  counts: ArrayLike,
  *,
  n: int,
  alpha: float,
  scale: ArrayLike,
  dim: int,
  noise: noise_lib.Noise | str | None = None,
  multiclass: bool = False,
  guarantee: str | None = None,
) -> Certificate:
  """Cohen's certificate from selection and estimation counts (host, float64).

  Args:
    counts_selection: ``[B, C]`` counts of the n0 selection samples.
    counts: ``[B, C]`` counts of the n independent estimation samples.
    n: number of estimation samples.
    alpha: error level.
    scale: ``[B]`` scalar noise scale per input for the radius.
    dim: input dimension (Linf radius of uniform noise).
    noise: noise family.
    multiclass: use Cohen's Theorem 1 with simultaneous bounds instead of the
      binary radius (Gaussian only).
    guarantee: override the description of the guarantee.

  Returns:
    A ``Certificate``.
  """
  noise = noise_lib.get_noise(noise)
  alpha = check_alpha(alpha)
  counts0, counts = np.asarray(counts_selection), np.asarray(counts)
  b = counts.shape[0]
  guess = counts0.argmax(axis=1)
  n_a = counts[np.arange(b), guess]
  if multiclass:
    if noise.norm != "l2" or not isinstance(noise, noise_lib.Gaussian):
      raise ValueError("multiclass=True is available for Gaussian noise (L2) only")
    others = counts[np.arange(counts.shape[1]) != guess[:, None]].reshape(b, -1)
    p_lower, p_upper_b = stats.multiclass_bounds(n_a, others, n, alpha)
    ok = p_lower > p_upper_b
    radius = np.where(ok, stats.multiclass_radius(p_lower, p_upper_b, scale), 0.0)
    desc = "multiclass Gaussian L2 (Cohen Thm 1, simultaneous Clopper-Pearson/Bonferroni bounds)"
  else:
    # Rounded down by the noise's margin (the sound 8-bit noise's; 0 otherwise: unchanged).
    p_lower = noise.round_p_lower(stats.clopper_pearson_lower(n_a, n, alpha))
    ok = p_lower >= 0.5
    radius = np.where(ok & (p_lower > 0.5), noise.radius(p_lower, scale, dim), 0.0)
    desc = f"binary {noise.name} {noise.norm} (Cohen et al. CERTIFY, one-sided Clopper-Pearson)"
    desc += noise.certifies
  return Certificate(
    prediction=np.where(ok, guess, ABSTAIN).astype(np.int64),
    radius=np.asarray(radius, np.float64),
    p_lower=np.asarray(p_lower, np.float64),
    counts=counts,
    counts_selection=counts0,
    norm=noise.norm,
    guarantee=guarantee
    or desc
    + f"; holds with prob >= 1 - {alpha} per input for the given "
    "sigma held fixed (not a guarantee if sigma was chosen from x: see rsjax.idrs)",
  )


@dataclasses.dataclass(frozen=True, eq=False)
class CohenRule:
  """Cohen et al.'s certificate rule: ``rule(selection, estimation) -> Certificate``.

  The top class of the selection counts, the one-sided Clopper-Pearson bound
  of its estimation count (or the multiclass bounds), the radius of the noise
  (:func:`certificate_from_counts`). :meth:`radius` is the radius alone, for a
  sampling rule that bounds ``p_A`` itself (``rsjax.engine.budget``).

  Attributes:
    settings: the sampling settings (``n``, ``alpha``, ``noise``).
    scale: ``[B]`` scalar noise scale per input.
    dim: input dimension.
    multiclass: Cohen's multiclass radius with simultaneous bounds.
    note: appended to the guarantee (e.g. on anisotropic sigma).
  """

  settings: Sampling
  scale: np.ndarray
  dim: int
  multiclass: bool = False
  note: str = ""

  def __call__(self, c0: np.ndarray, c1: np.ndarray) -> Certificate:
    s = self.settings
    cert = certificate_from_counts(
      c0,
      c1,
      n=s.n,
      alpha=s.alpha,
      scale=self.scale,
      dim=self.dim,
      noise=s.noise,
      multiclass=self.multiclass,
    )
    return dataclasses.replace(cert, guarantee=cert.guarantee + self.note) if self.note else cert

  def radius(self, p_lower: ArrayLike) -> np.ndarray:
    """``[B]`` float64 binary radius of lower bounds ``p_lower`` ``[B]`` (0 where ``<= 1/2``)."""
    p_lower = np.asarray(p_lower, np.float64)
    r = np.where(p_lower > 0.5, self.settings.noise.radius(p_lower, self.scale, self.dim), 0.0)
    return np.asarray(r, np.float64)


def cohen_passes(
  apply_fn: ApplyFn,
  params: PyTree,
  x: ArrayLike,
  sigma: ArrayLike,
  ids: ArrayLike | None,
  *,
  num_classes: int,
  settings: Sampling,
  multiclass: bool = False,
) -> tuple[EngineCounts, CohenRule]:
  """What Cohen's CERTIFY supplies to the driver: the engine's counts and :class:`CohenRule`.

  Args:
    apply_fn: ``apply_fn(params, x) -> logits``.
    params: pytree for ``apply_fn``.
    x: ``[B, *input_shape]`` inputs.
    sigma: float, ``[B]`` or ``[B, *input_shape]`` noise scale.
    ids: ``[B]`` dataset indices, or None.
    num_classes: C.
    settings: the sampling settings.
    multiclass: Cohen's multiclass radius with simultaneous bounds.

  Returns:
    ``(counts, rule)`` for :func:`run_certify`.
  """
  x_np, sig, ids_arr = prepare_inputs(x, sigma, ids)
  rule = cohen_rule(settings, x_np, sig, multiclass)
  return EngineCounts(apply_fn, params, x_np, sig, ids_arr, num_classes, settings), rule


def cohen_rule(
  settings: Sampling, x_np: np.ndarray, sig: np.ndarray, multiclass: bool = False
) -> CohenRule:
  """Cohen's certificate rule of prepared inputs (:func:`prepare_inputs`' arrays).

  Args:
    settings: the sampling settings.
    x_np: ``[B, *input_shape]`` inputs (their dimension enters the radius).
    sig: the noise scale of each input, ``[B, 1, ...]`` or ``[B, *input_shape]``
      (anisotropic: the radius is min(sigma) R, and the guarantee says so).
    multiclass: Cohen's multiclass radius with simultaneous bounds.
  """
  scale, aniso = scale_per_input(sig)
  note = (
    "; anisotropic sigma: isotropic radius min(sigma) * R (UCAN Cor. 3.3; see "
    "rsjax.ucan for the full region)"
  )
  return CohenRule(settings, scale, int(np.prod(x_np.shape[1:])), multiclass, note if aniso else "")
