"""The one CERTIFY driver that every method runs (:func:`run_certify`), its
sampling settings (:class:`Sampling`), the certificate it returns
(:class:`Certificate`), the engine's counts source (:class:`EngineCounts`) and
its sampling rules as values (:class:`SamplingRule`, :class:`FixedN`).

A method supplies its source of counts (its base classifier under noise) and
its certificate rule (its radius); a sampling rule says how many samples to
draw and when to stop; the driver runs them. This module imports no method
and no rule beyond :class:`FixedN` (budgeted CERTIFY's rule is
``rsjax.engine.budget.Budget``); Cohen et al.'s certificate rule is
``rsjax.engine.cohen_rule``; ``rsjax.certify`` and ``rsjax.predict`` are in
``rsjax.cohen``.

Counts come from the device engine (``rsjax.engine.counts``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Self, runtime_checkable

import jax
import numpy as np

from rsjax import noise as noise_lib
from rsjax import stats
from rsjax.engine import precision as precision_lib
from rsjax.engine.counts import (
  ApplyFn,
  PendingCounts,
  Placement,
  dispatch_counts,
  fold_keys,
  resolve_all,
)
from rsjax.util import KeyLike, PyTree, as_key, check_alpha, check_int

if TYPE_CHECKING:
  from jax.typing import ArrayLike

__all__ = [
  "ABSTAIN",
  "Batch",
  "Certificate",
  "EngineCounts",
  "FixedN",
  "Sampling",
  "SamplingRule",
  "engine_counts",
  "run_certify",
]

#: The prediction of an input the smoothed classifier abstains on (no class certified).
ABSTAIN = -1


#: The batch of the sampling rules that need a fixed step (budgeted, anytime) and of
#: SRS's chains when ``Sampling.batch_size`` is not told.
DEFAULT_BATCH = 1000


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
    batch_size: forward passes per step (SRS: the number of parallel chains);
      ``"auto"`` (the memory fit), ``"timed"`` (a timed probe) or None (not told:
      chosen by ``rsjax.engine.batch_timing.choose_batch_size``; the sampling rules
      that need a fixed step, and SRS's chains, take :data:`DEFAULT_BATCH`).
    noise: noise family or its name (None: Gaussian, L2); stored resolved.
    compute_dtype: the dtype the classifier runs in, set by ``precision``
      (``compute_dtype=jnp.bfloat16`` alone is ``precision="bfloat16"``).
    devices: number of local devices to use (None: all).
    precision: the declared precision of the classifier (``rsjax.engine.precision``):
      ``"float32"`` (default: full-precision float32 matmuls, also on GPUs
      whose JAX default is TF32), ``"tf32"`` or ``"bfloat16"``. Stored resolved.
  """

  n0: int = 100
  n: int = 100_000
  alpha: float = 0.001
  batch_size: int | str | None = None
  noise: Any = None
  compute_dtype: Any = None
  devices: int | None = None
  precision: str | None = None

  def __post_init__(self) -> None:
    def set_(name: str, value: object) -> None:  # frozen: normalize
      object.__setattr__(self, name, value)

    set_("n0", check_int("n0", self.n0))
    set_("n", check_int("n", self.n))
    why = stats.alpha_refusal(self.alpha)  # the claims table's line (rsjax.claims)
    if why is not None:
      raise ValueError(why)
    set_("alpha", check_alpha(self.alpha))
    if self.batch_size not in (None, "auto", "timed"):
      set_("batch_size", check_int("batch_size", self.batch_size))
    if self.devices is not None:
      set_("devices", check_int("devices", self.devices))
    set_("noise", noise_lib.get_noise(self.noise))
    set_("precision", precision_lib.resolve(self.precision, self.compute_dtype))
    set_("compute_dtype", precision_lib.compute_dtype(self.precision))

  @classmethod
  def of(cls, settings: Sampling | None = None, **fields: Any) -> Sampling:
    """``settings`` (default ``Sampling()``) with ``fields`` replaced.

    Raises:
      TypeError: for a keyword that is not a field.
    """
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(fields) - names)
    if unknown:
      raise TypeError(
        f"unexpected keyword argument(s) {unknown}; sampling settings are {sorted(names)}"
      )
    if settings is None:
      return cls(**fields)
    if not isinstance(settings, cls):
      raise ValueError(f"settings must be an rsjax.Sampling, got {settings!r}")
    return dataclasses.replace(settings, **fields) if fields else settings

  def replace(self, **fields: Any) -> Sampling:
    return dataclasses.replace(self, **fields)

  def fixed_batch(self, what: str) -> int:
    """The batch as a number, for ``what`` (a sampling rule or SRS) that needs one:
    the given int, :data:`DEFAULT_BATCH` when not told.

    Raises:
      ValueError: for ``"auto"`` or ``"timed"``.
    """
    if self.batch_size is None:
      return DEFAULT_BATCH
    if isinstance(self.batch_size, str):
      raise ValueError(f"{what} needs an integer batch_size, not {self.batch_size!r}")
    return int(self.batch_size)

  @classmethod
  def from_record(cls, stated: Any, **speed: Any) -> Sampling:
    """The settings a run states (an ``rsjax.records.sampling.RunSampling``; the inverse of
    ``rsjax.runs.record.run_sampling``), with the speed-only ``speed`` fields
    (``batch_size``, ``devices``) given. Its ``pack`` is a model transform, not a setting.
    """
    fields = dataclasses.asdict(stated)
    fields.pop("pack")
    return cls.of(**fields, **speed)


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

  #: Names of the extra result columns this certificate fills (:meth:`row_fields`).
  columns: ClassVar[tuple[str, ...]] = ()

  def row_fields(self, j: int) -> dict:
    """``{column: value}`` of the extra result columns of row ``j`` (:attr:`columns`)."""
    return {}

  def record_fields(self, j: int) -> dict:
    """What row ``j``'s radius depends on beyond its counts and the run (JSON values),
    added to its certificate record (``rsjax.runs.record``) for ``rsjax verify``."""
    return {}

  @classmethod
  def from_base(cls, base: Certificate, **fields: Any) -> Self:
    """A ``cls`` with the :class:`Certificate` fields of ``base`` (e.g. Cohen's certificate
    of the counts), ``fields`` replacing or adding to them."""
    own = {f.name: getattr(base, f.name) for f in dataclasses.fields(Certificate)}
    return cls(**(own | fields))


#: ``counts(key, num, *, selection=None, aux_key=None) -> counts`` (see :func:`run_certify`).
CountsFn = Callable[..., Any]
#: ``rule(selection, estimation) -> Certificate`` (see :func:`run_certify`).
RuleFn = Callable[[Any, Any], Certificate]

#: ``fold_in(key, i)`` of the passes: selection, estimation, and the auxiliary
#: randomness of the estimation pass (SRS's check positions).
SELECTION, ESTIMATION, AUXILIARY = 0, 1, 2


@dataclasses.dataclass(frozen=True, eq=False)
class EngineCounts:
  """The counts source of the core engine for inputs validated by ``prepare_inputs``.

  Called as ``counts(key, num, **_) -> PendingCounts``: the ``[B, C]`` int32
  counts of ``num`` samples per input, dispatched (one launch) and brought to
  the host by the driver (``rsjax.engine.counts.resolve_counts``); the driver's
  extra keywords are ignored. Its fields let a sampling rule draw its own
  passes from the same classifier and inputs (``rsjax.engine.budget``'s rounds).

  Attributes:
    apply_fn: ``apply_fn(params, x) -> logits``.
    params: pytree for ``apply_fn``.
    x: ``[B, *input_shape]`` inputs (NumPy).
    sigma: ``[B]`` or ``[B, *input_shape]`` noise scale (NumPy).
    ids: ``[B]`` dataset indices.
    num_classes: C.
    settings: the sampling settings (noise, batch size, precision, devices).
  """

  apply_fn: ApplyFn
  params: PyTree
  x: np.ndarray
  sigma: np.ndarray
  ids: np.ndarray
  num_classes: int
  settings: Sampling
  # The parameters and inputs, placed on the devices by the first pass only.
  placement: Placement = dataclasses.field(default_factory=Placement, init=False, repr=False)

  def __call__(self, key: jax.Array, num: int, **_: object) -> PendingCounts:
    s = self.settings
    return dispatch_counts(
      key,
      self.apply_fn,
      self.params,
      self.x,
      self.sigma,
      self.ids,
      num=num,
      num_classes=self.num_classes,
      batch_size=s.batch_size,
      noise=s.noise,
      precision=s.precision,
      devices=s.devices,
      placement=self.placement,
    )


def engine_counts(
  apply_fn: ApplyFn,
  params: PyTree,
  x_np: np.ndarray,
  sig: np.ndarray,
  ids_arr: np.ndarray,
  *,
  num_classes: int,
  settings: Sampling,
) -> EngineCounts:
  """The counts source of the core engine (:class:`EngineCounts`) for prepared inputs."""
  return EngineCounts(apply_fn, params, x_np, sig, ids_arr, num_classes, settings)


@runtime_checkable
class SamplingRule(Protocol):
  """How many samples CERTIFY draws and when it stops: a value the driver runs.

  ``run(key, counts, rule, settings) -> Certificate`` draws its passes from
  the method's ``counts`` source with keys ``fold_in(key, i)`` (``SELECTION``,
  ``ESTIMATION``, ``AUXILIARY``; a rule with several rounds folds further) and
  returns the certificate: the method's ``rule`` applied to the counts
  (:class:`FixedN`), or the rule's own certificate from the method's radius
  (``rsjax.engine.budget.Budget``). The driver has already made ``key`` a key,
  warned on a too small ``n`` and entered the run's precision; a rule raises
  ``ValueError`` for a method it cannot run.
  """

  def run(
    self, key: jax.Array, counts: CountsFn, rule: RuleFn, settings: Sampling
  ) -> Certificate: ...


@dataclasses.dataclass(frozen=True)
class FixedN:
  """Cohen et al.'s fixed sample sizes: ``n0`` selection, then ``n`` estimation samples.

  Both passes are dispatched before the host waits, once, for both, when the
  source's counts come back pending (the engine): one round trip per call
  (``resolve_all``), whatever ``n`` and the number of inputs. A source whose
  estimation reads the selection counts resolves them first (``resolve_counts``).
  The three keys are folded in one launch (``fold_keys``).
  """

  def run(self, key: jax.Array, counts: CountsFn, rule: RuleFn, settings: Sampling) -> Certificate:
    k_sel, k_est, k_aux = fold_keys(key, (SELECTION, ESTIMATION, AUXILIARY))
    selection = counts(k_sel, settings.n0)
    estimation = counts(k_est, settings.n, selection=selection, aux_key=k_aux)
    return rule(*resolve_all(selection, estimation))


def run_certify(
  key: KeyLike,
  counts: CountsFn,
  rule: RuleFn,
  settings: Sampling,
  *,
  tests: int = 1,
  sampling_rule: SamplingRule | None = None,
) -> Certificate:
  """CERTIFY, the one driver of every method: selection, estimation, certificate.

  A method supplies what differs: its source of counts (the engine; the
  shifted input of UCAN; SRS chains) and its certificate rule (Cohen's bound,
  IDRS's radius, UCAN's region, SRS's two-stage test), which states the
  guarantee and sets ``sound``. A sampling rule supplies how many samples to
  draw and when to stop (:class:`FixedN`, the default; budgeted CERTIFY's
  ``rsjax.engine.budget.Budget``; any :class:`SamplingRule`). The driver derives
  the keys from ``key`` and runs the rule at the run's precision, so that
  selection and estimation never share samples.

  Keys: selection ``fold_in(key, 0)``, estimation ``fold_in(key, 1)``, and
  ``fold_in(key, 2)`` for auxiliary randomness of the estimation pass (SRS's
  check positions). They are folded, not split: the same key certifies every
  chunk of a dataset (the noise is a function of key, input id and sample
  index), so it is not consumed.

  Args:
    key: ``jax.random.key`` or int seed.
    counts: ``counts(key, num, *, selection=None, aux_key=None)``: the counts
      of ``num`` samples per input (``[B, C]`` int, pending counts, or a
      method's record). The estimation pass gets the selection counts and the
      auxiliary key.
    rule: ``rule(selection, estimation) -> Certificate``.
    settings: the sampling settings.
    tests: the number of tests ``alpha`` is split over (for the sample-size
      warning; SRS: 2).
    sampling_rule: a :class:`SamplingRule` (default :class:`FixedN`).

  Returns:
    The ``Certificate`` of the sampling rule.

  Raises:
    ValueError: a ``sampling_rule`` that is not one, or that cannot run this method.
  """
  sampling_rule = FixedN() if sampling_rule is None else sampling_rule
  if not isinstance(sampling_rule, SamplingRule):
    raise ValueError(
      f"sampling_rule must have run(key, counts, rule, settings), got {sampling_rule!r}"
    )
  key = as_key(key)
  stats.check_sample_size(settings.n, settings.alpha / tests)
  # Every program the passes trace (the engine, SRS chains, budgeted rounds)
  # computes the classifier at the run's declared precision.
  with precision_lib.context(settings.precision):
    return sampling_rule.run(key, counts, rule, settings)


@dataclasses.dataclass(frozen=True)
class Batch:
  """What a certifier certifies: the inputs, the classifier, the noise and the settings of one
  ``rsjax.certify`` call or one chunk of a run (``certifier.certify(batch)``).

  Attributes:
    key: ``jax.random.key`` or int seed (not consumed: the noise of an input derives
      from it and the input's ``ids``).
    apply_fn: ``apply_fn(params, x) -> logits`` (a DEQ model for the DEQ certifiers).
    params: pytree for ``apply_fn`` (None for a DEQ model).
    x: ``[B, *input_shape]`` inputs.
    sigma: the noise scale: float, ``[B]`` or ``[B, *input_shape]``; each certifier says
      what else it takes (a sigma source for ``UCAN``, None for ``IDRS``).
    num_classes: number of classes C.
    settings: the :class:`Sampling` (``n0``, ``n``, ``alpha``, ``batch_size``, ``noise``, ...).
    ids: ``[B]`` dataset indices (reproducible noise per input), or None.
  """

  key: jax.Array | int
  apply_fn: Callable
  params: Any
  x: ArrayLike
  sigma: Any
  num_classes: int
  settings: Sampling
  ids: ArrayLike | None = None

  def replace(self, **fields: Any) -> Batch:
    """This batch with ``fields`` replaced (e.g. the inputs a certifier prepared)."""
    return dataclasses.replace(self, **fields)

  def run_engine(
    self,
    x_np: np.ndarray,
    sig: np.ndarray,
    ids_arr: np.ndarray,
    rule: RuleFn,
    sampling_rule: SamplingRule | None = None,
  ) -> Certificate:
    """CERTIFY (:func:`run_certify`) with the certificate rule ``rule`` on the engine's
    counts of this batch's classifier at prepared inputs.

    Args:
      x_np: ``[B, *input_shape]`` inputs (``prepare_inputs``' arrays, e.g. shifted by mu).
      sig: the noise scale of each input, ``[B, 1, ...]`` or ``[B, *input_shape]``.
      ids_arr: ``[B]`` dataset indices.
      rule: ``rule(selection_counts, estimation_counts) -> Certificate``.
      sampling_rule: how many samples it draws (default fixed ``n0`` and ``n``; a
        ``Budget`` for budgeted CERTIFY).

    Returns:
      The certificate ``rule`` makes of the counts.
    """
    args = (self.apply_fn, self.params, x_np, sig, ids_arr, self.num_classes, self.settings)
    counts = EngineCounts(*args)
    return run_certify(self.key, counts, rule, self.settings, sampling_rule=sampling_rule)
