"""CERTIFY with input-dependent sigma(x) (IDRS, Súkeník et al. Algorithm 3): the
certifier :class:`IDRS` of ``rsjax.certify`` and of ``--method idrs``, and :func:`certify`,
its alias.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, ClassVar

import numpy as np

from rsjax.cohen._certify import Batch, certify_with
from rsjax.engine import precision as precision_lib
from rsjax.engine.cohen_rule import certificate_from_counts
from rsjax.engine.counts import prepare_inputs
from rsjax.engine.driver import ABSTAIN, Certificate, Sampling
from rsjax.idrs import _radius
from rsjax.idrs._design import KnnSigma, make_design
from rsjax.idrs._radius import certified_radius
from rsjax.noise import Gaussian
from rsjax.noise.sigma import SigmaSource, SigmaValues
from rsjax.runs.method import Certifier, Context

__all__ = ["IDRSCertificate", "certify", "IDRS"]


@dataclasses.dataclass(frozen=True)
class IDRSCertificate(Certificate):
  """A ``Certificate`` with the per-input noise of input-dependent smoothing.

  Attributes:
    sigma: ``[B]`` float64 sigma(x) used at each input (float32 values).
    rate: the semi-elasticity used in the radius (design rate with rounding margin).
    slack: ``[B]`` additive envelope slack used in the radius.
  """

  sigma: np.ndarray | None = None
  rate: float = 0.0
  slack: np.ndarray | None = None

  columns: ClassVar[tuple[str, ...]] = ("sigma",)

  def row_fields(self, j: int) -> dict:
    return {"sigma": repr(float(self.sigma[j]))}

  def record_fields(self, j: int) -> dict:
    return {"sigma": float(self.sigma[j]), "slack": float(self.slack[j]), "rate": float(self.rate)}


@dataclasses.dataclass(frozen=True)
class IDRS(Certifier):
  """IDRS (Súkeník et al., ICML 2022, Algorithm 3) as a certifier of ``rsjax.certify``, and
  ``--method idrs``'s (``rsjax.idrs.METHOD``) with the kNN design of its options
  (``--idrs-rate``, ``--idrs-k``, ``--idrs-m``).

  sigma(x) comes from the design (pass ``sigma=None``); counts are sampled with
  that per-input sigma through the core engine; Cohen's selection (``n0``) and
  one-sided Clopper-Pearson bound (``n``) give ``p_lower``; the radius is
  Theorem 3.2's with the design's rate (and float-rounding slack). Selection and
  estimation use ``fold_in(key, 0)`` and ``fold_in(key, 1)``, as ``rsjax.certify``;
  with ``ConstantSigma`` the result equals Cohen's at that sigma.

  Attributes:
    design: a sigma source, ``evaluate(x) -> SigmaValues`` (``KnnSigma``,
      ``ConstantSigma``); its rate enters the radius.
    thresholds: optional numerical thresholds (``"mnist"``, ``"cifar10"``, a pair
      or a callable; see ``certified_radius``). Sound but conservative.
    rtol: bisection tolerance of the radius relative to Cohen's radius.
  """

  design: SigmaSource
  thresholds: Any = None
  rtol: float = 1e-4

  columns: ClassVar[tuple[str, ...]] = IDRSCertificate.columns

  @classmethod
  def from_options(
    cls, ctx: Context, *, idrs_rate: float, idrs_k: int, idrs_m: float | None
  ) -> IDRS:
    xtr = ctx.load_split("train").arrays()[0] if idrs_rate > 0 else None
    try:
      design = make_design(
        xtr, sigma=ctx.sigma, rate=idrs_rate, k=idrs_k, m=idrs_m, dataset=ctx.dataset.name
      )
    except ValueError as e:
      raise ValueError(f"{e} (set --idrs-m)") from None
    return cls(design)

  def sigma_of(self, ctx: Context) -> None:
    return None  # the design gives sigma(x)

  def describe(self, ctx: Context) -> str:
    return f"IDRS, design {self.design!r}"

  def details(self, ctx: Context) -> dict:
    return design_details(self.design)

  def certify(self, batch: Batch) -> IDRSCertificate:
    """Certifies a batch with input-dependent noise sigma(x) (IDRS Thm 3.2).

    Args:
      batch: the inputs ``x [B, *input_shape]``, classifier and settings (an
        ``rsjax.cohen.Batch``); its ``sigma`` is None (the design gives sigma(x)), its
        ``settings`` an ``rsjax.Sampling`` with Gaussian noise.

    Returns:
      ``IDRSCertificate``: prediction (-1 abstain), radius, p_lower, counts,
      counts_selection, and the per-input sigma.

    Raises:
      ValueError: for bad arguments.
      IDRSNumericalError: if a radius cannot be computed reliably.
    """
    settings = batch.settings
    if batch.sigma is not None:
      raise ValueError("IDRS takes sigma(x) from its design: pass sigma=None")
    if not isinstance(settings.noise, Gaussian):
      raise ValueError(f"IDRS certifies Gaussian noise only, got noise={settings.noise.name!r}")
    if not isinstance(self.design, SigmaSource):
      raise ValueError(
        f"design must be a sigma(x) design (KnnSigma, ConstantSigma), got {self.design!r}"
      )
    x_np, _, ids_arr = prepare_inputs(batch.x, 1.0, batch.ids)
    values, sigma_x = self._sigma(x_np, settings)
    sig = sigma_x.reshape((-1,) + (1,) * (x_np.ndim - 1))
    dim = int(np.prod(x_np.shape[1:]))
    sigma64 = sigma_x.astype(np.float64)
    alpha = settings.alpha

    def rule(c0, c1):
      base = certificate_from_counts(c0, c1, n=settings.n, alpha=alpha, scale=sigma64, dim=dim)
      return self._certificate(base, values, sigma64, dim, alpha)

    return batch.run_engine(x_np, sig, ids_arr, rule)

  def _sigma(self, x_np: np.ndarray, settings: Sampling) -> tuple[SigmaValues, np.ndarray]:
    """The design's sigma(x) of a batch, checked.

    Args:
      x_np: ``[B, *input_shape]`` inputs.
      settings: the run's ``rsjax.Sampling`` (its precision runs the design).

    Returns:
      ``(values, sigma)``: the design's ``SigmaValues`` and ``[B]`` float32 sigma(x).

    Raises:
      ValueError: a shift mu, an infinite rate, or sigma(x) not ``[B]``, finite and > 0.
    """
    with precision_lib.context(settings.precision):  # a design that runs a network
      values = self.design.evaluate(x_np)
    if values.mu is not None:
      raise ValueError("IDRS certifies zero-mean noise; the design returned a shift mu")
    if not np.isfinite(values.rate):
      raise ValueError(
        "the design's sigma(x) has rate inf (no bound on its change with x): no IDRS "
        "certificate; DDRS's optimized sigma is certified by rsjax.ddrs.certify"
      )
    sigma_x = np.asarray(values.sigma, np.float32)
    if sigma_x.shape != (x_np.shape[0],):
      raise ValueError(
        f"design returned sigma of shape {sigma_x.shape}, expected {(x_np.shape[0],)}"
      )
    if not np.all(np.isfinite(sigma_x)) or np.any(sigma_x <= 0):
      raise ValueError("sigma must be finite and > 0 everywhere (the design returned otherwise)")
    return values, sigma_x

  def _certificate(
    self, base: Certificate, values: SigmaValues, sigma64: np.ndarray, dim: int, alpha: float
  ) -> IDRSCertificate:
    """The IDRS certificate of Cohen's certificate ``base`` at sigma(x).

    Args:
      base: Cohen's certificate of the counts at scale ``sigma64`` (its ``p_lower``).
      values: the design's sigma(x): its ``rate`` (the semi-elasticity of the radius, the
        design's rate with rounding margin) and ``[B]`` additive envelope ``slack``.
      sigma64: ``[B]`` float64 sigma(x).
      dim: input dimension.
      alpha: the failure probability of each input's bound.

    Returns:
      An ``IDRSCertificate``: Cohen's radius where sigma is constant (rate 0, no slack,
      no thresholds), else Theorem 3.2's.
    """
    rate, slack = float(values.rate), np.asarray(values.slack, np.float64)
    constant = rate == 0.0 and np.all(slack == 0.0) and self.thresholds is None
    ok = base.prediction != ABSTAIN
    radius = np.zeros(len(base), np.float64)
    if constant:
      radius = np.asarray(base.radius, np.float64)
    elif np.any(ok):
      radius[ok] = certified_radius(
        base.p_lower[ok],
        sigma=sigma64[ok],
        rate=rate,
        dim=dim,
        slack=slack[ok],
        thresholds=self.thresholds,
        rtol=self.rtol,
      )
    return IDRSCertificate.from_base(
      base,
      radius=radius,
      norm="l2",
      guarantee=self._guarantee(base, bool(constant), rate, alpha),
      sound=True,
      sigma=sigma64,
      rate=rate,
      slack=slack,
    )

  def _guarantee(self, base: Certificate, constant: bool, rate: float, alpha: float) -> str:
    """What the certificate guarantees, in words (``base``: Cohen's certificate)."""
    if constant:
      return f"constant sigma (rate 0, Cohen's radius): {base.guarantee}"
    guarantee = (
      f"input-dependent sigma(x) (IDRS, Súkeník et al. ICML 2022, Thm 3.2, both sides "
      f"checked) for an r-semi-elastic sigma(x), rate r={rate:.6g} (design rate "
      f"{self.design.rate:.6g} with float-rounding margin); binary Gaussian L2, one-sided "
      f"Clopper-Pearson; holds with prob >= 1 - {alpha} per input for the smoothed "
      f"classifier that uses sigma(x) everywhere (the design fixed before seeing the test "
      f"inputs)"
    )
    if self.thresholds is not None:
      guarantee += f"; numerical thresholds {self.thresholds!r} (sound by Thm 3.1, conservative)"
    return guarantee


def _idrs(
  sigma: None, design: SigmaSource, thresholds: Any = None, rtol: float = 1e-4
) -> tuple[IDRS, None]:
  """``certify(..., design=, thresholds=None, rtol=1e-4)``: ``IDRS(design, thresholds, rtol)``
  (sigma None: the design gives sigma(x))."""
  return IDRS(design, thresholds, rtol), sigma


#: ``rsjax.certify(key, apply_fn, params, x, sigma=None, certifier=IDRS(design, thresholds,
#: rtol), ...)`` as ``certify(key, apply_fn, params, x, design=, ...)``: see :class:`IDRS`.
certify = functools.partial(certify_with, _idrs)


def design_details(design: object) -> dict:
  """What ``rsjax verify`` needs of an IDRS design: sigma(x)'s formula and the radius search."""
  # The radius search of certify at its defaults (rtol 1e-4, certified_radius's atol).
  out = {
    "design": repr(design),
    "radius_rtol": 1e-4,
    "radius_atol": 1e-7,
    "xi_margin": _radius.XI_MARGIN,
    "max_noncentrality": _radius.SEARCH_MAX_NONCENTRALITY,
  }
  if isinstance(design, KnnSigma):
    out.update(
      kind="knn",
      sigma_b=design.sigma_b,
      rate=design.rate,
      k=design.k,
      m=design.m,
      eps=design.eps,
      sigma_min=design.sigma_min,
      sigma_max=design.sigma_max,
    )
  else:
    out.update(kind="constant", sigma_b=float(design.sigma), rate=0.0)
  return out
