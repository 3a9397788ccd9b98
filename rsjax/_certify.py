"""CERTIFY and PREDICT of Cohen et al. for many inputs at once, and the one
CERTIFY driver that every method runs (:func:`run_certify`).

Counts come from the device engine (``rsjax._sampling``); the certificate is
computed on the host in float64 (``rsjax.stats``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from rsjax import noise as noise_lib
from rsjax import precision as precision_lib
from rsjax import stats
from rsjax._sampling import dispatch_counts, prepare_inputs, resolve_counts, sample_counts
from rsjax.util import as_key, check_alpha, check_int, scale_per_input

__all__ = ["ABSTAIN", "Certificate", "Sampling", "certificate_from_counts", "certify",
           "engine_counts", "predict", "run_certify"]

ABSTAIN = -1


@dataclasses.dataclass(frozen=True)
class Sampling:
  """How CERTIFY samples: the settings every method's ``certify`` takes (``settings=``).

  Every ``certify`` also accepts these fields as keywords
  (``rsjax.certify(..., n0=100, n=100_000, alpha=0.001, batch_size=1000)``),
  which build this object (:meth:`of`).

  Attributes:
    n0: selection samples per input.
    n: estimation samples per input (budgeted CERTIFY: the most any input gets).
    alpha: failure probability per input.
    batch_size: forward passes per step (SRS: the number of parallel chains),
      or ``"auto"`` (``rsjax.sample_counts``).
    noise: noise family or its name (None: Gaussian, L2); stored resolved.
    compute_dtype: the dtype the classifier runs in, set by ``precision``
      (``compute_dtype=jnp.bfloat16`` alone is ``precision="bfloat16"``).
    devices: number of local devices to use (None: all).
    precision: the declared precision of the classifier (``rsjax.precision``):
      ``"float32"`` (default: full-precision float32 matmuls, also on GPUs
      whose JAX default is TF32), ``"tf32"`` or ``"bfloat16"``. Stored resolved.
  """

  n0: int = 100
  n: int = 100_000
  alpha: float = 0.001
  batch_size: int | str = 1000
  noise: Any = None
  compute_dtype: Any = None
  devices: int | None = None
  precision: str | None = None

  def __post_init__(self):
    set_ = lambda name, value: object.__setattr__(self, name, value)  # frozen: normalize
    set_("n0", check_int("n0", self.n0))
    set_("n", check_int("n", self.n))
    set_("alpha", check_alpha(self.alpha))
    if self.batch_size != "auto":
      set_("batch_size", check_int("batch_size", self.batch_size))
    if self.devices is not None:
      set_("devices", check_int("devices", self.devices))
    set_("noise", noise_lib.get_noise(self.noise))
    set_("precision", precision_lib.resolve(self.precision, self.compute_dtype))
    set_("compute_dtype", precision_lib.compute_dtype(self.precision))

  @classmethod
  def of(cls, settings: "Sampling | None" = None, **fields) -> "Sampling":
    """``settings`` (default ``Sampling()``) with ``fields`` replaced.

    Raises:
      TypeError: for a keyword that is not a field.
    """
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(fields) - names)
    if unknown:
      raise TypeError(f"unexpected keyword argument(s) {unknown}; sampling settings are "
                      f"{sorted(names)}")
    if settings is None:
      return cls(**fields)
    if not isinstance(settings, cls):
      raise ValueError(f"settings must be an rsjax.Sampling, got {settings!r}")
    return dataclasses.replace(settings, **fields) if fields else settings

  def replace(self, **fields) -> "Sampling":
    return dataclasses.replace(self, **fields)


@dataclasses.dataclass(frozen=True)
class Certificate:
  """Certificates of a batch of inputs (NumPy fields).

  Attributes:
    prediction: ``[B]`` int, the certified class, or -1 (abstain).
    radius: ``[B]`` float64 certified radius in ``norm`` (0 on abstain).
    p_lower: ``[B]`` float64 lower confidence bound on the top-class probability.
    counts: ``[B, C]`` int estimation counts (n samples).
    counts_selection: ``[B, C]`` int selection counts (n0 samples).
    norm: the norm of the radius (``"l2"``, ``"l1"``, ``"linf"``).
    guarantee: what the radius guarantees, in words.
    sound: whether the radius is a certificate (holds with probability at
      least ``1 - alpha`` per input, as ``guarantee`` states). False for
      numbers reported only for comparison: per-input sigma chosen from ``x``
      without the DDRS memory, UCAN's input-dependent generators, SRS with the
      authors' code's bound or consecutive check positions.
  """

  prediction: np.ndarray
  radius: np.ndarray
  p_lower: np.ndarray
  counts: np.ndarray
  counts_selection: np.ndarray | None = None
  norm: str = "l2"
  guarantee: str = ""
  sound: bool = True

  @property
  def abstained(self) -> np.ndarray:
    return self.prediction == ABSTAIN

  def __len__(self) -> int:
    return int(self.prediction.shape[0])


#: ``counts(key, num, *, selection=None, aux_key=None) -> counts`` (see :func:`run_certify`).
CountsFn = Callable[..., Any]
#: ``rule(selection, estimation) -> Certificate`` (see :func:`run_certify`).
RuleFn = Callable[[Any, Any], Certificate]


def certificate_from_counts(counts_selection, counts, *, n, alpha, scale, dim, noise=None,
                            multiclass=False, guarantee=None) -> Certificate:
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
  counts0 = np.asarray(counts_selection)
  counts = np.asarray(counts)
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
    p_lower = stats.clopper_pearson_lower(n_a, n, alpha)
    ok = p_lower >= 0.5
    radius = np.where(ok & (p_lower > 0.5), noise.radius(p_lower, scale, dim), 0.0)
    desc = f"binary {noise.name} {noise.norm} (Cohen et al. CERTIFY, one-sided Clopper-Pearson)"
  prediction = np.where(ok, guess, ABSTAIN).astype(np.int64)
  return Certificate(
      prediction=prediction,
      radius=np.asarray(radius, np.float64),
      p_lower=np.asarray(p_lower, np.float64),
      counts=counts,
      counts_selection=counts0,
      norm=noise.norm,
      guarantee=guarantee or desc + f"; holds with prob >= 1 - {alpha} per input for the given "
      "sigma held fixed (not a guarantee if sigma was chosen from x: see rsjax.idrs)",
  )


def engine_counts(apply_fn, params, x_np, sig, ids_arr, *, num_classes: int,
                  settings: Sampling) -> CountsFn:
  """The counts source of the core engine for inputs validated by ``prepare_inputs``.

  Returns:
    ``counts(key, num, **_) -> PendingCounts``: the ``[B, C]`` int32 counts of
    ``num`` samples per input, dispatched (one launch) and brought to the host by
    the driver (``rsjax._sampling.resolve_counts``); the driver's extra keywords
    are ignored.
  """

  def counts(key, num, **_):
    return dispatch_counts(key, apply_fn, params, x_np, sig, ids_arr, num=num,
                           num_classes=num_classes, batch_size=settings.batch_size,
                           noise=settings.noise, precision=settings.precision,
                           devices=settings.devices)

  return counts


def run_certify(key, counts: CountsFn, rule: RuleFn, settings: Sampling, *,
                tests: int = 1) -> Certificate:
  """CERTIFY, the one driver of every method: selection, estimation, certificate.

  A method supplies what differs: its source of counts (the engine; the
  shifted input of UCAN; SRS chains) and its certificate rule (Cohen's bound,
  IDRS's radius, UCAN's region, SRS's two-stage test), which states the
  guarantee and sets ``sound``. The driver derives the keys and runs the
  passes, so that selection and estimation never share samples.

  Keys: selection ``fold_in(key, 0)``, estimation ``fold_in(key, 1)``, and
  ``fold_in(key, 2)`` for auxiliary randomness of the estimation pass (SRS's
  check positions).

  Counts may come back pending (``rsjax._sampling.PendingCounts``, from the
  engine): both passes are then dispatched before the host waits, once, for
  both (one round trip per call, whatever ``n`` and the number of inputs). A
  source whose estimation reads the selection counts resolves them first
  (``resolve_counts``). They are folded, not split: the same key certifies every
  chunk of a dataset (the noise is a function of key, input id and sample
  index), so it is not consumed.

  Args:
    key: ``jax.random.key`` or int seed.
    counts: ``counts(key, num, *, selection=None, aux_key=None)``: the counts
      of ``num`` samples per input (``[B, C]`` int, or a method's record). The
      estimation pass gets the selection counts and the auxiliary key.
    rule: ``rule(selection, estimation) -> Certificate``.
    settings: the sampling settings.
    tests: the number of tests ``alpha`` is split over (for the sample-size
      warning; SRS: 2).

  Returns:
    The rule's ``Certificate``.
  """
  key = as_key(key)
  stats.check_sample_size(settings.n, settings.alpha / tests)
  # Every program the passes trace (the engine, SRS chains, budgeted rounds)
  # computes the classifier at the run's declared precision.
  with precision_lib.context(settings.precision):
    selection = counts(jax.random.fold_in(key, 0), settings.n0)
    estimation = counts(jax.random.fold_in(key, 1), settings.n, selection=selection,
                        aux_key=jax.random.fold_in(key, 2))
  return rule(resolve_counts(selection), resolve_counts(estimation))


def certify(key, apply_fn, params, x, *, sigma, num_classes: int, settings: Sampling | None = None,
            ids=None, multiclass: bool = False, budget=None, **sampling) -> Certificate:
  """Cohen et al.'s CERTIFY for a batch of inputs.

  Selection (``n0`` samples) and estimation (``n`` samples) use independent keys
  (``fold_in(key, 0)`` and ``fold_in(key, 1)``); the top class of the selection counts is certified
  with the one-sided Clopper-Pearson bound of its estimation count.

  Args:
    key: ``jax.random.key`` or int seed.
    apply_fn: ``apply_fn(params, x) -> logits``.
    params: pytree for ``apply_fn``.
    x: ``[B, *input_shape]`` inputs.
    sigma: float, ``[B]`` or ``[B, *input_shape]`` noise scale.
    num_classes: number of classes C.
    settings: a :class:`Sampling` (``n0``, ``n``, ``alpha``, ``batch_size``,
      ``noise``, ``compute_dtype``, ``devices``; default ``Sampling()``).
    ids: ``[B]`` dataset indices (reproducible noise per input).
    multiclass: Cohen's multiclass radius with simultaneous bounds.
    budget: a radius grid (``rsjax.budgeted.Budget`` or a sequence of radii):
      budgeted CERTIFY, which stops each input once its certified grid radius
      can no longer change, with at most ``n`` estimation samples and the same
      guarantee (``rsjax.budgeted.certify``; binary radius only).
    **sampling: fields of :class:`Sampling` given as keywords (``n0=100,
      n=100_000, alpha=0.001, batch_size=1000, noise=None, ...``); they override
      ``settings``.

  Returns:
    ``Certificate`` with NumPy fields (a ``BudgetedCertificate``, which also
    holds ``num_samples``, with ``budget``).

  Raises:
    ValueError: for bad arguments (named in the message).
  """
  from rsjax.traced import refuse_traced
  refuse_traced("rsjax.certify", key, params, x, sigma, ids)
  settings = Sampling.of(settings, **sampling)
  if budget is not None:
    if multiclass:
      raise ValueError("budget= gives the binary radius only, not multiclass=True")
    from rsjax import budgeted  # lazy: budgeted builds on this module
    return budgeted.certify(key, apply_fn, params, x, sigma=sigma, num_classes=num_classes,
                            budget=budget, settings=settings, ids=ids)
  x_np, sig, ids_arr = prepare_inputs(x, sigma, ids)
  scale, aniso = scale_per_input(sig)
  dim = int(np.prod(x_np.shape[1:]))

  def rule(c0, c1):
    cert = certificate_from_counts(c0, c1, n=settings.n, alpha=settings.alpha, scale=scale,
                                   dim=dim, noise=settings.noise, multiclass=multiclass)
    if aniso:
      cert = dataclasses.replace(
          cert, guarantee=cert.guarantee + "; anisotropic sigma: isotropic radius min(sigma) * R "
          "(UCAN Cor. 3.3; see rsjax.anisotropic for the full region)")
    return cert

  counts = engine_counts(apply_fn, params, x_np, sig, ids_arr, num_classes=num_classes,
                         settings=settings)
  return run_certify(key, counts, rule, settings)


def predict(key, apply_fn, params, x, *, sigma, num_classes: int, settings: Sampling | None = None,
            ids=None, **sampling) -> np.ndarray:
  """Cohen et al.'s PREDICT: the top class, or -1 when the two-sided binomial test
  of the top two counts at 1/2 has p-value above ``alpha``.

  Uses ``n`` samples (key ``key`` itself), ``alpha``, ``batch_size``, ``noise``,
  ``precision`` and ``devices`` of the settings (``settings`` and/or the
  same keywords as :func:`certify`).

  Returns:
    ``[B]`` int NumPy array of classes (-1 = abstain).
  """
  from rsjax.traced import refuse_traced
  refuse_traced("rsjax.predict", key, params, x, sigma, ids)
  s = Sampling.of(settings, **sampling)
  counts = sample_counts(key, apply_fn, params, x, sigma=sigma, num_classes=num_classes, num=s.n,
                         batch_size=s.batch_size, ids=ids, noise=s.noise,
                         precision=s.precision, devices=s.devices)
  order = np.argsort(-counts, axis=1, kind="stable")
  top = order[:, 0]
  n1 = counts[np.arange(len(top)), top]
  n2 = counts[np.arange(len(top)), order[:, 1]] if counts.shape[1] > 1 else np.zeros_like(n1)
  pval = stats.binomial_test_half(n1, n2)
  return np.where(pval <= s.alpha, top, ABSTAIN).astype(np.int64)
