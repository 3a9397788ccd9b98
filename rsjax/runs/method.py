"""What a certify method is: one value (:class:`Method`) with its options, its claims, its
certifier and its check.

A method package (``rsjax.cohen``, ``rsjax.idrs``, ``rsjax.ucan``, ``rsjax.ddrs``,
``rsjax.srs``) exports its :class:`Method` value from a module that imports
no JAX (``<package>.method``), so ``rsjax verify`` can read the registry
(``rsjax.methods.METHODS``, the tuple of these values) without a device. The
value says everything that differs between methods:

* ``name``, ``summary`` and ``options`` (each an :class:`Option`; the command
  turns it into ``--name``),
* ``certifier``: the string path (``"package.module:Name"``) of its JAX half, a
  :class:`Certifier` (imported when a run is built): the one value of the method,
  what ``rsjax.certify(certifier=...)`` takes and what a run executes. Built from the
  run's context and the options (``from_options``), it certifies each chunk of the run
  and says in which order, its result columns and its run-wide details.
  :meth:`Method.build` is the one way every run gets it,
* ``noises``, ``multiclass``, ``budget``: what a run of it may claim (JAX-free data that
  ``rsjax.claims.refusal`` reads alike for certify, verify and audit),
* ``check(view, results, records, *, rtol, atol, inputs) -> [Mismatch]``: how
  ``rsjax verify`` derives every row's radius again from its record (NumPy and
  SciPy only),
* ``ordered``: the rows must be in the run's order (a memory across inputs).

Each row's output comes from its certificate (``Certificate.columns``,
``row_fields``, ``record_fields``), not from callbacks.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from rsjax.claims import _claims as claims

if TYPE_CHECKING:  # types only: this module imports no JAX
  import jax

  from rsjax.engine.driver import Batch, Certificate, Sampling

__all__ = ["INIT", "Certifier", "Context", "Method", "Option", "Training"]


@dataclasses.dataclass(frozen=True)
class Option:
  """One option of a method (the command's ``--name`` with ``_`` -> ``-``).

  Attributes:
    name: keyword of the method's ``Certifier.from_options``.
    default: default value.
    help: one line for ``--help``.
    type: ``int``, ``float``, ``str``, ``bool`` (a switch: ``--name`` sets it) or a
      ``str -> value`` converter that raises ``ValueError`` on bad text.
    choices: allowed values, or None.
    positive: the value must be > 0 (numbers).
  """

  name: str
  default: Any
  help: str
  type: Callable[[str], Any] = str
  choices: tuple | None = None
  positive: bool = False


#: ``rsjax train --init DIR``, an option of the training halves that fine-tune: training
#: starts from the weights of the model directory ``DIR`` (of the same architecture).
INIT = Option("init", None, "fine-tune: start from the weights of the model in this directory", str)


@dataclasses.dataclass(frozen=True)
class Context:
  """What every method gets: the trained model, the data and the common settings.

  Attributes:
    key: ``jax.random.key`` of the run (the noise of input ``i`` derives from it
      and ``i``; it is not consumed).
    model: the trained NNX model.
    apply_fn: its pure eval-mode ``apply_fn(params, x) -> logits``.
    params: variables of ``apply_fn``.
    dataset: the dataset certified (``num_classes``, ``input_shape``, ``name``).
    sigma: the noise level (float; by default the training sigma).
    settings: the ``rsjax.Sampling`` of every certify call (``n0``, ``n``,
      ``alpha``, ``batch_size``, the noise family, ...).
    multiclass: the multiclass radius with simultaneous bounds.
    workdir: the model directory (methods may read saved state from it), or None.
    load_split: ``load_split(split) -> Dataset`` of the same dataset (e.g. the
      training inputs of IDRS's kNN sigma).
    files: files a method reads that its options do not name, where a reader moved them,
      by role (``rsjax audit --parent-model-dir``: ``{"parent_model": DIR}``).
  """

  key: jax.Array
  model: Any
  apply_fn: Callable[..., Any]
  params: Any
  dataset: Any
  sigma: float
  settings: Sampling
  multiclass: bool = False
  workdir: str | None = None
  load_split: Callable[[str], Any] | None = None
  files: Mapping[str, str] = dataclasses.field(default_factory=dict, hash=False)

  def claim(self, method: str, options: dict[str, Any]) -> claims.Claim:
    """What a run of ``method`` with ``options`` in this context claims
    (``rsjax.claims.refusal`` says whether rsjax certifies it)."""
    from rsjax.records.sampling import RunSampling
    from rsjax.runs.record import noise_name

    s = self.settings
    return claims.Claim.of_run(
      method=method,
      # Packing is a model transform (rsjax.models.pack_narrow_stage), legal in every claim:
      # verify reads it from the record.
      sampling=RunSampling(noise=noise_name(s.noise), precision=s.precision, alpha=s.alpha),
      options=options,
      multiclass=self.multiclass,
    )


class Certifier(Protocol):
  """A method's certifier: the value ``rsjax.certify(..., certifier=)`` takes is what a run of
  the method executes. ``Method.certifier`` names its class (imported only when a run is
  built); :meth:`from_options` builds it from the run's context and options, and
  ``rsjax.runs.runner.certify_dataset`` certifies each chunk of the run with
  ``certify(Batch(ctx.key, *classifier(ctx), x, sigma_of(ctx), ...))``, which is
  ``rsjax.certify(ctx.key, apply_fn, params, x, sigma=sigma_of(ctx), ids=ids,
  certifier=self, settings=ctx.settings)``.

  A certifier subclasses this protocol for its defaults: the run's sigma and classifier, no
  extra columns, no run-wide details, the caller's inputs per call, chunks in any order.

  Attributes:
    columns: the extra result columns (``Certificate.columns`` of what ``certify`` returns).
    sequential: the chunks must run in the dataset's order in one process (a memory carries
      state from input to input; :meth:`restore` replays the rows already written).
    inputs_per_call: a good number of inputs per call, or None (the caller's default).
  """

  columns: ClassVar[tuple[str, ...]] = ()
  sequential: bool = False
  inputs_per_call: int | None = None

  @classmethod
  def from_options(cls, ctx: Context, *args: Any, **options: Any) -> Certifier:
    """The certifier of a run in ``ctx`` with every option given (``Method.build`` fills the
    defaults); raises ``ValueError`` (one line) for settings it cannot run."""
    raise ValueError(f"{cls.__name__} has no options to be built from")

  def certify(self, batch: Batch) -> Certificate:
    """The ``Certificate`` of a ``rsjax.engine.driver.Batch`` (one call, or a run's chunk)."""
    ...

  def sigma_of(self, ctx: Context) -> Any:
    """The ``sigma`` of ``rsjax.certify`` in a run (default the run's sigma)."""
    return ctx.sigma

  def classifier(self, ctx: Context) -> tuple[Callable, Any]:
    """``(apply_fn, params)`` of ``rsjax.certify`` in a run (default the run's)."""
    return ctx.apply_fn, ctx.params

  def describe(self, ctx: Context) -> str:
    """One line on the run's settings (printed by the command)."""
    return type(self).__name__

  def details(self, ctx: Context) -> dict | None:
    """Run-wide facts the radius depends on (JSON dict), kept in the run record
    (``RunSpec.details``) for ``rsjax verify``; None when there are none."""
    return None

  def restore(self, x: Any, predict: Any, radius: Any) -> None:
    """Replays rows already written (resume) into a ``sequential`` certifier's memory."""
    raise ValueError(f"{type(self).__name__} keeps no state to restore")


def _resolve(path: str) -> Any:
  """The object a ``"package.module:Name"`` path names (imported now)."""
  module, _, name = path.partition(":")
  return getattr(importlib.import_module(module), name)


def _check_path(owner: str, what: str, path: str) -> None:
  """Raises ``ValueError`` unless ``path`` reads ``"package.module:Name"``."""
  module, _, name = path.partition(":")
  if not module or not name.isidentifier():
    raise ValueError(f"{owner}: {what} must be 'package.module:Name', got {path!r}")


def _with_defaults(owner: str, declared: tuple[Option, ...], given: dict[str, Any]) -> dict:
  """``given`` over the defaults of ``declared``; raises ``ValueError`` on an unknown name."""
  unknown = sorted(set(given) - {o.name for o in declared})
  if unknown:
    raise ValueError(
      f"{owner} has no option {unknown}; its options: {sorted(o.name for o in declared)}"
    )
  return {**{o.name: o.default for o in declared}, **given}


@dataclasses.dataclass(frozen=True)
class Training:
  """How a method's base classifier is trained (``rsjax train --method <name>``): the
  training half of a :class:`Method`, as JAX-free as its certify half.

  Attributes:
    trainer: ``"package.module:function"``, ``function(job, **options) -> str``: trains
      ``job`` (a ``rsjax.training.TrainJob``: the model, the data, the shared
      ``TrainConfig``, the workdir) and returns the closing line the command prints;
      raises ``ValueError`` (one line) for settings it cannot train. Imported by
      :meth:`train` only.
    summary: one line for ``--help``.
    options: its own options (``rsjax train``'s ``--name`` flags, as ``certify``'s).
  """

  trainer: str
  summary: str
  options: tuple[Option, ...] = ()

  def __post_init__(self) -> None:
    _check_path("training", "trainer", self.trainer)

  def train(self, job: Any, **options: Any) -> str:
    """Trains ``job`` with the given options over the defaults; the closing line.

    Raises:
      ValueError: an unknown option, or settings the trainer cannot run.
    """
    options = _with_defaults(f"trainer {self.trainer!r}", self.options, options)
    return _resolve(self.trainer)(job, **options)


@dataclasses.dataclass(frozen=True)
class Method:
  """A certify method as one value (an entry of ``rsjax.methods.METHODS``).

  The protocol, in three parts. What a run may claim is data here (``noises``,
  ``multiclass``, ``budget``), read alike by certify, verify and audit through
  ``rsjax.claims.refusal``. Its certifier (``certifier``) is one value: the class
  ``rsjax.certify(..., certifier=...)`` takes, built for a run by :meth:`build` with
  ``Certifier.from_options(ctx, **options)`` and run by
  ``rsjax.runs.runner.certify_dataset(ctx, certifier, ...)``, each chunk
  ``certifier.certify(Batch(...))`` with the run's key, ``classifier(ctx)``,
  ``sigma_of(ctx)`` and settings; its ``columns``, ``sequential``, ``describe(ctx)``,
  ``details(ctx)`` and ``restore`` say the rest (:class:`Certifier`). Its ``check``
  derives each row again for ``rsjax verify``, without JAX.

  Attributes:
    name: the ``--method`` name.
    summary: one line for ``--help``.
    certifier: ``"package.module:Name"``, the :class:`Certifier` of the method (its JAX
      half, the class ``rsjax.certify`` takes too: imported by :meth:`build`, never by
      ``rsjax verify``).
    options: its options (shared ``Option`` objects may appear in several methods).
    check: ``check(view, results, records, *, rtol, atol, inputs) -> [Mismatch]``,
      the radii derived again from the run's records (``rsjax.claims``; NumPy
      and SciPy only), or None when the method's radius cannot be verified.
    ordered: ``rsjax verify`` requires the rows in the run's order.
    columns: the extra result columns the method defines and its ``check``
      verifies (``rsjax verify`` lists any other column as unverified).
    training: how its base classifier is trained (``rsjax train --method``), or None
      when it certifies classifiers trained otherwise.
    noises: the ``--noise`` names it certifies (``rsjax.claims.GAUSSIAN``: Gaussian only), or
      None: every noise.
    multiclass: it gives the multiclass radius (``--multiclass``, Gaussian noise).
    budget: it runs budgeted CERTIFY (options ``grid`` and ``budget_rule``).
    timed_batch: the run's batch changes only its speed (the engine's forward batch), so a
      run not told one takes a timed probe's (``rsjax.engine.batch_timing``); False where
      the batch is part of the run (SRS: the number of chains).
    batch_detail: the entry of the run's ``details`` that states the batch its counts depend
      on (SRS: ``"chains"``), which ``rsjax audit`` draws again with; None where the batch
      changes no count.
    radius_columns: ``{column: what it is}``, the extra columns of ``columns`` that hold
      radii other than the certified ``radius`` (``rsjax analyze --radius-column`` reads
      only these, headed "not the certified radius").
    paths: ``paths(options, locate) -> options``, the options with every file path they name
      mapped by ``locate(role, path)`` (JAX-free), or None when they name none: certify
      records the paths relative to the result file's folder, verify and audit resolve them
      against it (``rsjax.records.paths``).
    bind: ``"package.module:function"``, ``function(options) -> options``: the options with
      the facts of the files they name (Dual RS's experts' fingerprints) added before any
      noise is drawn, so the claim, and the key, bind them; or None. Imported when a run is
      prepared.
    claim_words: ``claim_words(options, sampling) -> str``, what a run of it claims in words
      where the noise, sigma and radius of the run's record do not say it (the ablation
      methods draw no noise), for ``rsjax verify``'s and ``rsjax analyze``'s one-line
      summaries (JAX-free); None: the noise, sigma, N and alpha.
  """

  name: str
  summary: str
  certifier: str
  options: tuple[Option, ...] = ()
  check: Callable[..., list] | None = None
  ordered: bool = False
  columns: tuple[str, ...] = ()
  training: Training | None = None
  noises: tuple[str, ...] | None = None
  multiclass: bool = False
  budget: bool = False
  timed_batch: bool = True
  batch_detail: str | None = None
  radius_columns: Mapping[str, str] = dataclasses.field(default_factory=dict, hash=False)
  paths: Callable[[dict, Callable[[str, str], str]], dict] | None = None
  bind: str | None = None
  claim_words: Callable[[Mapping[str, Any], Any], str] | None = None

  def __post_init__(self) -> None:
    _check_path(f"method {self.name!r}", "certifier", self.certifier)
    if self.bind is not None:
      _check_path(f"method {self.name!r}", "bind", self.bind)
    other = sorted(set(self.radius_columns) - set(self.columns))
    if other:
      raise ValueError(f"method {self.name!r}: radius_columns {other} are not in its columns")

  def located(self, options: Mapping[str, Any], locate: Callable[[str, str], str]) -> dict:
    """``options`` with the file paths they name mapped by ``locate(role, path)`` (as they
    are for a method whose options name no file)."""
    options = dict(options)
    return options if self.paths is None else self.paths(options, locate)

  def bound(self, options: Mapping[str, Any]) -> dict:
    """``options`` with the facts of the files they name (``bind``), before any noise."""
    options = dict(options)
    return options if self.bind is None else _resolve(self.bind)(options)

  def defaults(self) -> dict[str, Any]:
    """``{option: default}``."""
    return {o.name: o.default for o in self.options}

  def build(self, context: Context, **options: Any) -> Certifier:
    """The run's certifier (the class ``certifier`` names) built from the given options over
    the defaults, once the claim of the run is legal (``rsjax.claims.refusal``).

    Raises:
      ValueError: an unknown option, or settings the method cannot run.
    """
    options = _with_defaults(f"method {self.name!r}", self.options, options)
    why = claims.refusal(context.claim(self.name, options), self)
    if why is not None:
      raise ValueError(why)
    return _resolve(self.certifier).from_options(context, **options)
