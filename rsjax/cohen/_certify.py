"""CERTIFY and PREDICT of Cohen et al. for many inputs at once (``rsjax.certify``,
``rsjax.predict``).

Cohen's CERTIFY is the driver (``rsjax.engine.driver.run_certify``) run on the
engine's counts with Cohen's certificate rule (``cohen_rule``), under the
sampling rule its caller picks: fixed ``n0`` and ``n`` by default, budgeted
CERTIFY's ``rsjax.engine.budget.Budget`` with ``budget=``. ``--method cohen`` runs with
:class:`Cohen` too.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from rsjax import stats
from rsjax.claims import thresholds_digest
from rsjax.engine.anytime import Anytime, anytime_decisions
from rsjax.engine.budget import Budget, BudgetedCertificate, as_budget
from rsjax.engine.cohen_rule import cohen_rule
from rsjax.engine.counts import prepare_inputs, refuse_traced
from rsjax.engine.driver import (
  ABSTAIN,
  Batch,
  Certificate,
  Sampling,
  engine_counts,
)
from rsjax.noise import lattice
from rsjax.runs.method import Certifier, Context
from rsjax.util import as_key

if TYPE_CHECKING:
  import jax
  from jax.typing import ArrayLike

__all__ = [
  "Batch",
  "Cohen",
  "INPUT_RANGE",
  "certify",
  "certify_with",
  "predict",
]

#: The scale rsjax expects inputs in, as Cohen et al.'s images: sigma is in units of ``x``.
INPUT_RANGE = (0.0, 1.0)


def check_input_range(name: str, x: Any, input_range: tuple[float, float] | None) -> None:
  """Raises ``ValueError`` if images ``x`` hold a value outside ``input_range`` by more than
  half its width (one host-side min and max; None: no check). A uint8 image in 0-255 (or one
  normalized by a mean and std) would otherwise be certified with ``sigma`` in other units
  than meant; an image plus a small perturbation (a radius under test) is not refused.

  Images are inputs of an integer dtype or of 3 or more axes (``[B, H, W(, C)]``); feature
  vectors ``[B, d]`` of a float dtype have no canonical scale and are not checked.
  """
  if input_range is None:
    return
  a = np.asarray(x)  # a jax.Array keeps its host copy for prepare_inputs
  if a.size == 0 or not np.issubdtype(a.dtype, np.number):
    return  # prepare_inputs says what is wrong
  if a.ndim < 3 and not np.issubdtype(a.dtype, np.integer):
    return
  lo, hi = float(np.min(a)), float(np.max(a))
  low, high = input_range
  slack = 0.5 * (high - low)  # x + a small perturbation (a test of a radius) stays accepted
  if not (math.isfinite(lo) and math.isfinite(hi)) or (lo >= low - slack and hi <= high + slack):
    return  # NaN and inf: prepare_inputs refuses them
  hint = " (uint8 pixels? divide by 255)" if a.dtype == np.uint8 or hi > 1.5 else ""
  raise ValueError(
    f"{name}: x holds values in [{lo:g}, {hi:g}], outside input_range={tuple(input_range)}"
    f"{hint}; sigma is in the units of x, so rescale x, or pass input_range=(low, high) "
    "to certify at this scale (input_range=None: no check)"
  )


def check_apply_fn(name: str, apply_fn: Any, params: Any) -> None:
  """Raises ``TypeError`` when ``apply_fn`` is a Flax NNX module rather than a function
  ``apply_fn(params, x) -> logits`` (the module would be called as ``model(params, x)``)."""
  nnx = sys.modules.get("flax.nnx")
  if nnx is None or not isinstance(apply_fn, nnx.Module):
    return
  raise TypeError(
    f"{name}: apply_fn is an NNX module ({type(apply_fn).__name__}), not a function "
    "apply_fn(params, x) -> logits: pass the pair rsjax.models.to_apply_fn(model) "
    "returns, apply_fn, params = rsjax.models.to_apply_fn(model)"
    + ("" if params is None else " (params given here are not the module's state)")
  )


def check_sample_sizes(name: str, settings: Sampling) -> None:
  """Raises ``ValueError`` if ``n < n0``: every input would abstain (or the two were swapped)."""
  if settings.n < settings.n0:
    raise ValueError(
      f"{name}: n={settings.n} is smaller than n0={settings.n0}: n counts the estimation "
      "samples that bound p_A, n0 the few that select the class (Cohen et al.: n0=100, "
      "n=100_000); swapped?"
    )


def _announce(name: str, x: Any, samples: str) -> float:
  """``progress=True``: a line on stderr before the call; its start time."""
  b = int(np.shape(x)[0]) if np.ndim(x) else 0
  print(f"{name}: {b} inputs x {samples} noisy samples ...", file=sys.stderr, flush=True)
  return time.perf_counter()


def _done(name: str, start: float) -> None:
  print(f"{name}: done in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)


@dataclasses.dataclass(frozen=True)
class Cohen(Certifier):
  """Cohen et al.'s certificate: what :func:`certify` does by default (a certifier), and
  ``--method cohen``'s (``rsjax.cohen.METHOD``): fixed, or budgeted on a radius grid
  (``--grid``, ``--budget-rule``).

  Attributes:
    multiclass: the multiclass radius with simultaneous bounds.
    budget: a budgeted sampling rule (``rsjax.Budget``, ``rsjax.Anytime``) or a
      radius grid (a sequence of radii: ``Budget``'s default looks): budgeted
      CERTIFY, which stops each input once its certified grid radius can no
      longer change, with at most ``n`` estimation samples and the same
      guarantee (binary radius only).
  """

  multiclass: bool = False
  budget: Budget | Anytime | Sequence[float] | None = None

  def __post_init__(self) -> None:
    if self.budget is not None and self.multiclass:
      raise ValueError("budget= gives the binary radius only, not multiclass=True")

  @classmethod
  def from_options(
    cls, ctx: Context, *, grid: tuple[float, ...] | None, budget_rule: str = "looks"
  ) -> Cohen:
    if grid is None:
      return cls(ctx.multiclass)
    rule = Anytime if budget_rule == "anytime" else Budget
    return cls(ctx.multiclass, rule(grid=tuple(grid)))

  @property
  def columns(self) -> tuple[str, ...]:  # type: ignore[override]
    return Certificate.columns if self.budget is None else BudgetedCertificate.columns

  @property
  def inputs_per_call(self) -> int | None:  # type: ignore[override]
    # Budgeted inputs stop independently and share launches: certify 16 per call.
    return None if self.budget is None else 16

  def describe(self, ctx: Context) -> str:
    # The claim is legal (Method.build: rsjax.claims.refusal).
    what = f"Cohen et al.'s CERTIFY, {ctx.settings.noise.name} noise, sigma={ctx.sigma}"
    if self.budget is None:
      return what
    budget = as_budget(self.budget)
    kind = " (anytime-valid)" if isinstance(budget, Anytime) else ""
    return f"{what}, budgeted{kind} on the radius grid {[float(r) for r in budget.grid]}"

  def details(self, ctx: Context) -> dict | None:
    noise = ctx.settings.noise
    # Sound 8-bit noise: the record names its threshold table (verify computes it again).
    table = {"noise_table": lattice.table_hash(ctx.sigma)} if noise.lattice else {}
    if self.budget is None:
      return table or None
    # The rule and its schedule (the rule's defaults) are part of the run's record.
    rule = as_budget(self.budget)
    if isinstance(rule, Anytime):
      # The integer thresholds the engine will use, named by their digest (verify derives
      # them again and compares).
      s, dim = ctx.settings, math.prod(ctx.dataset.input_shape)
      t = anytime_decisions(rule, n_max=s.n, alpha=s.alpha, noise=noise, scales=ctx.sigma, dim=dim)
      schedule = {**rule.record(), "thresholds": thresholds_digest(t.looks, t.c[0].T)}
    else:
      schedule = {
        "first": rule.first,
        "ratio": rule.ratio,
        "final_share": rule.final_share,
        "stop_alpha": rule.stop_alpha,
      }
    return {"budget": schedule, **table}

  def certify(self, batch: Batch) -> Certificate:
    """Selection and estimation passes on independent keys, Cohen's certificate.

    Args:
      batch: the inputs, classifier, noise and settings (:class:`Batch`).

    Returns:
      A ``Certificate`` (a ``BudgetedCertificate`` with ``budget``).
    """
    budget = None if self.budget is None else as_budget(self.budget)
    x_np, sig, ids_arr = prepare_inputs(batch.x, batch.sigma, batch.ids)
    rule = cohen_rule(batch.settings, x_np, sig, self.multiclass)
    return batch.run_engine(x_np, sig, ids_arr, rule, sampling_rule=budget)


def certify(
  key: jax.Array | int,
  apply_fn: Callable,
  params: Any,
  x: ArrayLike,
  *,
  sigma: Any = None,
  num_classes: int,
  certifier: Certifier | None = None,
  settings: Sampling | None = None,
  ids: ArrayLike | None = None,
  multiclass: bool = False,
  budget: Budget | Anytime | Sequence[float] | None = None,
  input_range: tuple[float, float] | None = INPUT_RANGE,
  progress: bool = False,
  **sampling: Any,
) -> Certificate:
  """CERTIFY of a batch of inputs with any method: the one call shape of rsjax.

  By default Cohen et al.'s CERTIFY: selection (``n0`` samples) and estimation
  (``n`` samples) use independent keys (``fold_in(key, 0)`` and ``fold_in(key,
  1)``); the top class of the selection counts is certified with the one-sided
  Clopper-Pearson bound of its estimation count. Another method is a
  ``certifier`` value that says what differs (``rsjax.cohen.Cohen``,
  ``rsjax.idrs.IDRS``, ``rsjax.ucan.UCAN``, ``rsjax.ddrs.DDRS``,
  ``rsjax.srs.SRS``, ``rsjax.srs.StandardRS``); its ``certify`` is called with
  the arguments as one :class:`Batch`.

  Args:
    key: ``jax.random.key`` or int seed (not consumed: one key serves every
      chunk of a dataset, the noise of an input derives from its ``ids``).
    apply_fn: ``apply_fn(params, x) -> logits`` (a DEQ model for the DEQ
      certifiers, ``params`` None).
    params: pytree for ``apply_fn``.
    x: ``[B, *input_shape]`` inputs.
    sigma: float, ``[B]`` or ``[B, *input_shape]`` noise scale; UCAN's frozen
      noise for ``UCAN``; None for ``IDRS`` (its design gives sigma(x)).
    num_classes: number of classes C.
    certifier: the method (default ``Cohen(multiclass, budget)``).
    settings: a :class:`Sampling` (``n0``, ``n``, ``alpha``, ``batch_size``,
      ``noise``, ``compute_dtype``, ``devices``; default ``Sampling()``).
    ids: ``[B]`` dataset indices (reproducible noise per input).
    multiclass: Cohen's multiclass radius (``Cohen(multiclass=True)``).
    budget: budgeted CERTIFY on this radius grid (``Cohen(budget=...)``).
    input_range: ``(low, high)`` the values of images ``x`` (integer dtype, or 3 or more
      axes) must lie in, up to half its width (default ``(0, 1)``, the scale of Cohen et
      al.'s images: ``sigma`` is in units of ``x``); None: no check.
    progress: say on stderr what is drawn before the call and its time after (off by
      default; ``rsjax certify`` shows a progress bar over its inputs).
    **sampling: fields of :class:`Sampling` given as keywords (``n0=100,
      n=100_000, alpha=0.001, batch_size=1000, noise=None, ...``); they override
      ``settings``. ``n < n0`` is refused.

  Returns:
    The certifier's ``Certificate`` (NumPy fields; a ``BudgetedCertificate``,
    which also holds ``num_samples``, with ``budget``).

  Raises:
    ValueError: for bad arguments (named in the message).
  """
  refuse_traced("rsjax.certify", key, params, x, sigma, ids)
  check_apply_fn("rsjax.certify", apply_fn, params)
  settings = Sampling.of(settings, **sampling)
  check_sample_sizes("rsjax.certify", settings)
  check_input_range("rsjax.certify", x, input_range)
  if certifier is None:
    certifier = Cohen(multiclass=multiclass, budget=budget)
  elif multiclass or budget is not None:
    raise ValueError(
      "multiclass= and budget= are Cohen's: with certifier= give them to rsjax.cohen.Cohen"
    )
  start = _announce("rsjax.certify", x, f"(n0 {settings.n0} + n {settings.n})") if progress else 0
  cert = certifier.certify(Batch(key, apply_fn, params, x, sigma, num_classes, settings, ids))
  if progress:
    _done("rsjax.certify", start)
  return cert


def certify_with(
  make: Callable[..., tuple[Certifier, Any]],
  key: jax.Array | int,
  apply_fn: Callable,
  params: Any,
  x: ArrayLike,
  *,
  num_classes: int,
  sigma: Any = None,
  settings: Sampling | None = None,
  ids: ArrayLike | None = None,
  input_range: tuple[float, float] | None = INPUT_RANGE,
  progress: bool = False,
  **options: Any,
) -> Certificate:
  """:func:`certify` with ``certifier, sigma = make(sigma, **options)``: each method's alias
  (``rsjax.idrs.certify``, ``rsjax.ucan.certify``, ``rsjax.ddrs.certify``,
  ``rsjax.srs.certify``) is ``functools.partial(certify_with, make)``.

  ``options`` that are fields of :class:`Sampling` override ``settings``; the others are
  ``make``'s (the method's own keywords, e.g. IDRS's ``design=``).
  """
  fields = {f.name for f in dataclasses.fields(Sampling)}
  own = {k: v for k, v in options.items() if k not in fields}
  certifier, sigma = make(sigma, **own)
  sampling = {k: v for k, v in options.items() if k in fields}
  return certify(
    key,
    apply_fn,
    params,
    x,
    sigma=sigma,
    num_classes=num_classes,
    certifier=certifier,
    settings=settings,
    ids=ids,
    input_range=input_range,
    progress=progress,
    **sampling,
  )


def predict(
  key: jax.Array | int,
  apply_fn: Callable,
  params: Any,
  x: ArrayLike,
  *,
  sigma: Any,
  num_classes: int,
  settings: Sampling | None = None,
  ids: ArrayLike | None = None,
  input_range: tuple[float, float] | None = INPUT_RANGE,
  progress: bool = False,
  **sampling: Any,
) -> np.ndarray:
  """Cohen et al.'s PREDICT: the top class, or -1 when the two-sided binomial test
  of the top two counts at 1/2 has p-value above ``alpha``.

  Uses ``n`` samples (key ``key`` itself), ``alpha``, ``batch_size``, ``noise``,
  ``precision`` and ``devices`` of the settings (``settings`` and/or the
  same keywords as :func:`certify`); ``input_range`` and ``progress`` as :func:`certify`'s.

  Returns:
    ``[B]`` int NumPy array of classes (-1 = abstain).
  """
  refuse_traced("rsjax.predict", key, params, x, sigma, ids)
  check_apply_fn("rsjax.predict", apply_fn, params)
  s = Sampling.of(settings, **sampling)
  check_input_range("rsjax.predict", x, input_range)
  x_np, sig, ids_arr = prepare_inputs(x, sigma, ids)
  start = _announce("rsjax.predict", x, f"n {s.n}") if progress else 0.0
  source = engine_counts(apply_fn, params, x_np, sig, ids_arr, num_classes=num_classes, settings=s)
  counts = source(as_key(key), s.n).result()
  if progress:
    _done("rsjax.predict", start)
  order = np.argsort(-counts, axis=1, kind="stable")
  top = order[:, 0]
  n1 = counts[np.arange(len(top)), top]
  n2 = counts[np.arange(len(top)), order[:, 1]] if counts.shape[1] > 1 else np.zeros_like(n1)
  pval = stats.binomial_test_half(n1, n2)
  return np.where(pval <= s.alpha, top, ABSTAIN).astype(np.int64)
