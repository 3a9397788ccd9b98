"""UCAN's CERTIFY (Cohen's passes on the shifted input ``x + mu``, the normalized region): the
certifier :class:`UCAN` of ``rsjax.certify`` and of ``--method ucan``, and :func:`certify`,
its alias."""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from rsjax import models
from rsjax.cohen._certify import Batch, certify_with
from rsjax.engine import precision as precision_lib
from rsjax.engine.cohen_rule import CohenRule
from rsjax.engine.counts import prepare_inputs
from rsjax.engine.driver import Certificate
from rsjax.noise.sigma import SigmaSource
from rsjax.runs import record
from rsjax.runs.method import Certifier, Context
from rsjax.ucan._generators import FrozenNoise, pattern_sigma
from rsjax.ucan._noise_file import NOISE_FILE, load_universal_noise, noise_file_hash
from rsjax.ucan._region import alm, isotropic_radius

if TYPE_CHECKING:
  import jax
  from jax.typing import ArrayLike

__all__ = ["AnisotropicCertificate", "certify", "certify_input_dependent", "UCAN"]


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

  columns: ClassVar[tuple[str, ...]] = ("normalized_radius", "alm", "sound")

  def row_fields(self, j: int) -> dict:
    return {
      "normalized_radius": repr(float(self.normalized_radius[j])),
      "alm": repr(float(self.alm[j])),
      "sound": int(bool(self.sound)),
    }


_UNSOUND = (
  "input-dependent noise (a sigma source with rate inf: (mu, sigma) computed from x, e.g. UCAN's "
  "certification-wise generator) is not sound: the classifier deployed at x + delta smooths "
  "with mu(x + delta), sigma(x + delta), not with the (mu, sigma) the region around x was "
  "computed for (the objection of UCAN's reviewers; see IDRS for a sound input-dependent bound "
  "and DDRS/ANCER for memory-based schemes). Pass allow_unsound=True to compute the paper's "
  "numbers anyway, labelled NOT A CERTIFICATE."
)


def _noise_arrays(values, x_shape) -> tuple[np.ndarray, np.ndarray]:
  """``(sigma, mu)`` of a source's values as float32 ``[B, *input_shape]`` (mu 0 if None)."""
  sig = np.asarray(values.sigma, np.float32)
  if sig.shape == x_shape[:1]:  # one scale per input (e.g. an IDRS design)
    sig = np.broadcast_to(sig.reshape(x_shape[:1] + (1,) * (len(x_shape) - 1)), x_shape)
  if sig.shape != x_shape:
    raise ValueError(
      f"the sigma source returned sigma of shape {sig.shape}, expected [B]="
      f"{x_shape[:1]} or [B, *input_shape]={x_shape}"
    )
  shift = np.zeros(x_shape, np.float32) if values.mu is None else np.asarray(values.mu, np.float32)
  if shift.shape != x_shape:
    raise ValueError(f"the sigma source returned mu of shape {shift.shape}, expected {x_shape}")
  if not np.all(np.isfinite(shift)):
    raise ValueError("mu contains NaN or inf values")
  return sig, shift


@dataclasses.dataclass(frozen=True)
class UCAN(Certifier):
  """Anisotropic smoothing (UCAN Theorem 3.2) as a certifier of ``rsjax.certify``, and
  ``--method ucan``'s (``rsjax.ucan.METHOD``): frozen ``(mu, sigma)``, the model directory's
  dataset-wise noise or a pattern.

  Certifies ``g(x) = argmax_c P[f(x + mu + sigma * eps) = c]``: Cohen et al.'s
  CERTIFY (``rsjax.run_certify``) on the shifted input ``x + mu`` with
  per-dimension ``sigma``; selection and estimation keys are ``fold_in(key, 0)``
  and ``fold_in(key, 1)`` (the key is not consumed). The region is centered at
  ``x``.

  Attributes:
    multiclass: Cohen's multiclass radius for the unit noise (Gaussian only).
    allow_unsound: certify noise whose rate is not 0 (``(mu, sigma)`` computed
      from ``x``) anyway, labelled ``NOT A CERTIFICATE`` (``sound=False``).
    noise: a run's frozen ``(mu, sigma)`` (its ``sigma_of``), or None: the run's sigma.
    pattern: the pattern's parameters (``pattern``, ``kappa``, ``iota``) where ``noise`` is
      a pattern, None where it is the model directory's dataset-wise noise.
  """

  multiclass: bool = False
  allow_unsound: bool = False
  noise: FrozenNoise | None = dataclasses.field(default=None, compare=False)
  pattern: dict | None = dataclasses.field(default=None, compare=False)

  columns: ClassVar[tuple[str, ...]] = AnisotropicCertificate.columns

  @classmethod
  def from_options(
    cls, ctx: Context, *, ucan_sigma: str, ucan_pattern: str, ucan_kappa: float, ucan_iota: float
  ) -> UCAN:
    noise = _frozen_noise(ctx, ucan_sigma)
    if noise is not None:
      return cls(ctx.multiclass, noise=noise)
    shape = tuple(ctx.dataset.input_shape)
    scales = pattern_sigma(shape, pattern=ucan_pattern, kappa=ucan_kappa, iota=ucan_iota)
    pattern = {"pattern": ucan_pattern, "kappa": ucan_kappa, "iota": ucan_iota}
    return cls(ctx.multiclass, noise=FrozenNoise(ctx.sigma * scales), pattern=pattern)

  def sigma_of(self, ctx: Context) -> Any:
    return ctx.sigma if self.noise is None else self.noise

  def describe(self, ctx: Context) -> str:
    if self.noise is None:
      return "UCAN"
    lo, hi = f"{self.noise.sigma.min():.4g}", f"{self.noise.sigma.max():.4g}"
    if self.pattern is None:
      what = f"dataset-wise (mu, sigma) from {NOISE_FILE} (sigma in [{lo}, {hi}])"
    else:
      p = self.pattern
      what = (
        f"pattern-wise sigma = {ctx.sigma} * ({p['kappa']} ||(a, b)||_{p['pattern'][1:]}^2 + "
        f"{p['iota']}) in [{lo}, {hi}]"
      )
    return f"UCAN, {what}; radius = min(sigma) * normalized_radius"

  def details(self, ctx: Context) -> dict | None:
    if self.noise is None:
      return None
    if self.pattern is not None:
      return _details(self.noise, "pattern", sigma=ctx.sigma, **self.pattern)
    # The scales' file, bound by its hash (verify reads it beside the run).
    noise_file = noise_file_hash(os.path.join(os.fspath(ctx.workdir), NOISE_FILE))
    return _details(self.noise, "dataset", noise_file=noise_file)

  def certify(self, batch: Batch) -> AnisotropicCertificate:
    """Certifies a batch with frozen anisotropic noise ``(mu, sigma)``.

    Args:
      batch: the inputs ``x [B, *input_shape]``, classifier and settings (an
        ``rsjax.cohen.Batch``; the settings' noise is the base noise family). Its ``sigma``:
        float, ``[*input_shape]`` (shared) or ``[B, *input_shape]`` scales > 0 (the noise is
        ``sigma * eps`` with ``eps`` unit base noise; fold the family's lambda into sigma),
        or a sigma source (``rsjax.SigmaSource``: ``FrozenNoise(sigma, mu)``,
        ``InputDependentNoise``, ``UCANModel.noise_source``) whose ``evaluate(x)`` gives
        sigma ``[B]`` or ``[B, *input_shape]``, mu and the rate.

    Returns:
      ``AnisotropicCertificate``: ``radius`` = ``min_i sigma_i * R``,
      ``normalized_radius`` = R, ``alm``.

    Raises:
      ValueError: for bad arguments, or input-dependent noise without
        ``allow_unsound``.
    """
    settings, sigma, ids = batch.settings, batch.sigma, batch.ids
    noise = settings.noise
    x_np, _, _ = prepare_inputs(batch.x, 1.0, ids)
    source = sigma if isinstance(sigma, SigmaSource) else FrozenNoise(sigma)
    with precision_lib.context(settings.precision):  # a generator network runs as the classifier
      values = source.evaluate(x_np)
    input_dependent = values.rate != 0.0
    if input_dependent and not self.allow_unsound:
      raise ValueError(_UNSOUND)
    b = x_np.shape[0]
    sig, shift = _noise_arrays(values, x_np.shape)
    x_shift, sig, ids_arr = prepare_inputs(x_np + shift, sig, ids)
    dim = int(np.prod(x_np.shape[1:]))
    p = noise.norm
    region = (
      f"with prob >= 1 - {settings.alpha} per input, g(x + delta) = prediction for every "
      f"delta with ||delta / sigma||_{p[1:]} <= normalized_radius (UCAN Thm 3.2, "
      f"{noise.name} base noise, {'multiclass' if self.multiclass else 'binary'} "
      "Clopper-Pearson CERTIFY), for the given (mu, sigma) held fixed; radius = min(sigma) "
      f"* normalized_radius is the {p} ball inside it (Cor. 3.3); alm is a "
      "volume-equivalent radius, not a ball guarantee"
    )
    if input_dependent:
      guarantee = (
        f"NOT A CERTIFICATE: (mu, sigma) were computed from x (rate {values.rate:g}: "
        "input-dependent noise), "
        "so the deployed classifier at x + delta uses other noise; the radii are reported "
        "only to compare with the UCAN paper. Formula used: " + region
      )
    else:
      guarantee = (
        region + "; valid for input-independent (mu, sigma): fixed patterns or "
        "dataset-wise generators frozen after training"
      )

    cohen = CohenRule(settings, np.ones(b), dim, self.multiclass)  # unit noise

    def rule(c0, c1):
      base = cohen(c0, c1)
      r = base.radius  # unit-noise radius: the normalized R
      return AnisotropicCertificate.from_base(
        base,
        radius=isotropic_radius(r, sig),
        norm=p,
        guarantee=guarantee,
        sound=not input_dependent,
        normalized_radius=r,
        alm=alm(r, sig),
      )

    return batch.run_engine(x_shift, sig, ids_arr, rule)


def _ucan(
  sigma: Any, mu: ArrayLike | None = None, multiclass: bool = False, allow_unsound: bool = False
) -> tuple[UCAN, Any]:
  """``certify(..., sigma=, mu=None, multiclass=False, allow_unsound=False)``:
  ``UCAN(multiclass, allow_unsound)`` at ``FrozenNoise(sigma, mu)`` (``sigma`` may also be a
  sigma source; then ``mu`` is None: the source gives it)."""
  if mu is not None:
    if isinstance(sigma, SigmaSource):
      raise ValueError("mu must be None when sigma is a sigma source (the source gives mu)")
    sigma = FrozenNoise(sigma, mu)
  return UCAN(multiclass, allow_unsound), sigma


#: ``rsjax.certify(key, apply_fn, params, x, sigma=FrozenNoise(sigma, mu),
#: certifier=UCAN(multiclass, allow_unsound), ...)`` as ``certify(key, apply_fn, params, x,
#: sigma=, mu=None, multiclass=False, allow_unsound=False, ...)``: see :class:`UCAN`.
certify = functools.partial(certify_with, _ucan)


def certify_input_dependent(
  key: jax.Array | int,
  model: Any,
  x: ArrayLike,
  *,
  sigma: float,
  num_classes: int,
  allow_unsound: bool = False,
  **kwargs: Any,
) -> AnisotropicCertificate:
  """UCAN's numbers for the input-dependent generator: NOT a certificate.

  Runs :func:`rsjax.ucan.certify` with the generator's sigma source
  (``model.noise_source(sigma)``: for the input generator ``(mu(x), sigma(x))``
  per input, rate inf); the result has ``sound=False``. For a sound certificate
  train the ``universal`` generator and certify its frozen noise.

  Args:
    key: ``jax.random.key`` or int seed.
    model: a trained ``rsjax.ucan.training.UCANModel`` (``load_ucan_model``): its ``classifier`` and ``noise_source(sigma)``.
    x: ``[B, *input_shape]`` inputs.
    sigma: lambda of training.
    num_classes: number of classes.
    allow_unsound: must be True for the input generator (otherwise ValueError).
    **kwargs: passed to :func:`rsjax.ucan.certify` (n0, n, alpha, ids, ...).

  Returns:
    ``rsjax.ucan.AnisotropicCertificate`` (``sound=False`` for the input
    generator).
  """
  from rsjax.models import to_apply_fn

  apply_fn, params = to_apply_fn(model.classifier)
  return certify(
    key,
    apply_fn,
    params,
    x,
    sigma=model.noise_source(sigma),
    num_classes=num_classes,
    allow_unsound=allow_unsound,
    **kwargs,
  )


def _trained_unsound(workdir: str | None) -> bool:
  """Whether the model directory's config marks its training noise as not sound."""
  if not workdir or not os.path.exists(os.path.join(os.fspath(workdir), models.CONFIG_FILE)):
    return False
  return models.read_config(workdir).get("sound", True) is False


def _frozen_noise(ctx: Context, ucan_sigma: str) -> FrozenNoise | None:
  """The model directory's dataset-wise noise (``--ucan-sigma`` auto or dataset), or None
  for a pattern; refuses what UCAN cannot certify."""
  shape = tuple(ctx.dataset.input_shape)
  if ucan_sigma == "auto" and _trained_unsound(ctx.workdir):
    raise ValueError(
      "the model was trained with UCAN's input-dependent generator, which gives no "
      "certificate (rsjax.ucan.certify_input_dependent reports its unsound "
      "numbers); pass --ucan-sigma pattern to certify the classifier with pattern-wise "
      "noise instead"
    )
  noise = load_universal_noise(ctx.workdir) if ucan_sigma != "pattern" else None
  if ucan_sigma == "dataset" and noise is None:
    raise ValueError(
      f"--ucan-sigma dataset needs the universal generator's {NOISE_FILE} in the "
      "model directory (rsjax.ucan.save_universal_noise); use --ucan-sigma pattern"
    )
  if noise is not None and noise.sigma.shape != shape:
    raise ValueError(
      f"{NOISE_FILE} holds sigma of shape {noise.sigma.shape}, the dataset's inputs are {shape}"
    )
  return noise


def _details(noise: FrozenNoise, source: str, **extra: Any) -> dict:
  """What ``rsjax verify`` needs of UCAN's frozen ``(mu, sigma)``: the scales' minimum
  (radius = min(sigma) R) and geometric mean (alm), fingerprints of both arrays, and
  ``extra``: the pattern's parameters when sigma is a pattern, the scales file's hash
  when it is dataset-wise."""
  sig = np.asarray(noise.sigma, np.float32)
  mu = np.zeros_like(sig) if noise.mu is None else np.asarray(noise.mu, np.float32)
  return {
    "source": source,
    "sigma_min": float(sig.min()),
    "sigma_gmean": float(np.exp(np.mean(np.log(sig.astype(np.float64))))),
    "sigma_fingerprint": record.input_fingerprint(sig),
    "mu_fingerprint": record.input_fingerprint(mu),
    **extra,
  }
