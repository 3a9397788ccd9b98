"""Certify methods by name: the registry shared by the library and the ``rsjax`` command.

A :class:`Method` says how to certify a dataset with a trained model: its
options (name, default, help; the command turns each into a ``--flag``), and a
``build(context, **options) -> Plan`` that returns the per-chunk certify
function, the extra result columns and how to fill them. Adding a method is one
entry in :data:`METHODS`::

  method = rsjax.methods.METHODS["ucan"]
  plan = method.plan(context, ucan_pattern="l1")   # the other options at their defaults
  runner.certify_dataset(plan.certify_fn, ds.get_batch, indices, "out.tsv",
                         extra_columns=plan.columns, extra_fn=plan.row,
                         restore=rsjax.methods.restorer(plan, ds))

Every entry states what its radius guarantees (``Certificate.guarantee``) and
writes a ``sound`` column (1: a certificate; 0: numbers reported for comparison
only) when the method can produce results that are not certificates.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from rsjax._certify import Sampling
from rsjax.deq import SOLVERS, SolverConfig

__all__ = ["Context", "METHODS", "Method", "Option", "Plan", "UNIVERSAL_NOISE_FILE",
           "load_universal_noise", "restorer", "save_universal_noise"]

UNIVERSAL_NOISE_FILE = "ucan_noise.npz"  # rsjax.training.ucan.NOISE_FILE, generator "universal"


@dataclasses.dataclass(frozen=True)
class Option:
  """One option of a method (the command's ``--name`` with ``_`` -> ``-``).

  Attributes:
    name: keyword of ``Method.build``.
    default: default value.
    help: one line for ``--help``.
    type: ``int``, ``float``, ``str`` or a ``str -> value`` converter that
      raises ``ValueError`` on bad text.
    choices: allowed values, or None.
    positive: the value must be > 0 (numbers).
  """

  name: str
  default: Any
  help: str
  type: Callable = str
  choices: tuple | None = None
  positive: bool = False


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
    sampling: the ``rsjax.Sampling`` of every certify call (``n0``, ``n``,
      ``alpha``, ``batch_size``, the noise family, ...).
    multiclass: the multiclass radius with simultaneous bounds.
    workdir: the training workdir (methods may read saved state from it), or None.
    load_split: ``load_split(split) -> Dataset`` of the same dataset (e.g. the
      training inputs of IDRS's kNN sigma).
  """

  key: jax.Array
  model: Any
  apply_fn: Callable
  params: Any
  dataset: Any
  sigma: float
  sampling: Sampling = Sampling()
  multiclass: bool = False
  workdir: str | None = None
  load_split: Callable | None = None


@dataclasses.dataclass(frozen=True)
class Plan:
  """A method ready to run on chunks of a dataset.

  Attributes:
    certify_fn: ``certify_fn(x [b, ...], ids [b]) -> Certificate``.
    columns: names of the extra result columns.
    row: ``row(cert, j) -> {column: value}`` for row ``j`` of one call.
    describe: one line on the settings (printed by the command).
    sequential: the chunks must run in the dataset's order in one process
      (a memory carries state from input to input).
    inputs_per_call: a good number of inputs per call, or None (the caller's default).
    restore: ``restore(x, predict, radius)`` replays rows already written
      (resume) into the method's state; None when it has none.
    record: ``record(cert, j) -> {field: JSON value}``: what row ``j``'s radius
      depends on beyond its counts (e.g. IDRS's sigma and slack), added to the
      row's certificate record (``rsjax.record``) for ``rsjax verify``; None
      when the counts and the run-wide settings are all.
    details: run-wide facts the radius depends on (JSON dict), kept as the
      ``"details"`` of the run's certificate record (``rsjax.record.header``).
  """

  certify_fn: Callable
  columns: tuple[str, ...] = ()
  row: Callable | None = None
  describe: str = ""
  sequential: bool = False
  restore: Callable | None = None
  inputs_per_call: int | None = None
  record: Callable | None = None
  details: dict | None = None


@dataclasses.dataclass(frozen=True)
class Method:
  """A registry entry.

  Attributes:
    name: the ``--method`` name.
    summary: one line for ``--help``.
    build: ``build(context, **options) -> Plan``; raises ``ValueError`` (one
      line) for settings it cannot run.
    options: its options (shared ``Option`` objects may appear in several methods).
  """

  name: str
  summary: str
  build: Callable[..., Plan]
  options: tuple[Option, ...] = ()

  def defaults(self) -> dict:
    """``{option: default}``."""
    return {o.name: o.default for o in self.options}

  def plan(self, context: Context, **options) -> Plan:
    """``build`` with the given options over the defaults.

    Raises:
      ValueError: an unknown option, or settings the method cannot run.
    """
    unknown = sorted(set(options) - {o.name for o in self.options})
    if unknown:
      raise ValueError(f"method {self.name!r} has no option {unknown}; its options: "
                       f"{sorted(self.defaults())}")
    return self.build(context, **{**self.defaults(), **options})


def restorer(plan: Plan, dataset) -> Callable | None:
  """The ``restore`` hook of ``rsjax.runner.certify_dataset`` for a plan (None if stateless).

  It replays the rows already in the result file (their inputs from
  ``dataset.get_batch``) into the plan's state, e.g. the DDRS memory.
  """
  if plan.restore is None:
    return None

  def restore(results) -> None:
    if len(results.idx):
      x, _ = dataset.get_batch(np.asarray(results.idx))
      plan.restore(np.asarray(x), np.asarray(results.predict), np.asarray(results.radius))

  return restore


def _sound_column(cert, j) -> dict:
  return {"sound": int(bool(cert.sound))}


# ----------------------------------------------------------------------------- cohen


def parse_grid(text: str) -> tuple[float, ...]:
  """A radius grid ``"0,0.25,0.5"`` -> ascending radii >= 0 (``--grid``)."""
  try:
    radii = tuple(float(v) for v in text.split(","))
  except ValueError:
    raise ValueError(f"expected comma-separated radii, got {text!r}") from None
  if not all(np.isfinite(r) and r >= 0 for r in radii) or any(
      b <= a for a, b in zip(radii, radii[1:])):
    raise ValueError(f"radii must be >= 0 and strictly increasing, got {text}")
  return radii


def _gaussian_l2(ctx: Context) -> bool:
  from rsjax import noise as noise_lib
  noise = ctx.sampling.noise
  return isinstance(noise, noise_lib.Gaussian) and noise.norm == "l2"


def _binary_gaussian_only(ctx: Context, method: str) -> None:
  """Refuses, before anything runs, what a Gaussian binary-radius method cannot do."""
  if ctx.multiclass:
    raise ValueError(f"--multiclass works with --method cohen or ucan, not {method}")
  if not _gaussian_l2(ctx):
    raise ValueError(f"--method {method} certifies with Gaussian noise only, not --noise "
                     f"{ctx.sampling.noise.name}")


def _cohen(ctx: Context, *, grid) -> Plan:
  import rsjax
  if ctx.multiclass and not _gaussian_l2(ctx):
    raise ValueError(f"--multiclass (Cohen et al.'s multiclass L2 radius) works with Gaussian "
                     f"noise only, not --noise {ctx.sampling.noise.name}")
  if grid is not None and ctx.multiclass:
    raise ValueError("--grid (budgeted CERTIFY) works with --method cohen and the binary radius "
                     "only")

  def fn(x, ids):
    return rsjax.certify(ctx.key, ctx.apply_fn, ctx.params, x, sigma=ctx.sigma, ids=ids,
                         num_classes=ctx.dataset.num_classes, settings=ctx.sampling,
                         multiclass=ctx.multiclass, budget=grid)

  what = f"Cohen et al.'s CERTIFY, {ctx.sampling.noise.name} noise, sigma={ctx.sigma}"
  if grid is None:
    return Plan(fn, describe=what)
  # Budgeted inputs stop independently and share launches: certify 16 per call.
  return Plan(fn, ("samples",), lambda cert, j: {"samples": int(cert.num_samples[j])},
              describe=f"{what}, budgeted on the radius grid {list(grid)}", inputs_per_call=16)


# ----------------------------------------------------------------------------- idrs


def _idrs(ctx: Context, *, idrs_rate, idrs_k, idrs_m) -> Plan:
  from rsjax import idrs
  _binary_gaussian_only(ctx, "idrs")
  name = ctx.dataset.name
  xtr = ctx.load_split("train").arrays()[0] if idrs_rate > 0 else None
  try:
    design = idrs.make_design(xtr, sigma=ctx.sigma, rate=idrs_rate, k=idrs_k, m=idrs_m,
                              dataset=name)
  except ValueError as e:
    raise ValueError(f"{e} (set --idrs-m)") from None

  def fn(x, ids):
    return idrs.certify(ctx.key, ctx.apply_fn, ctx.params, x, design=design, ids=ids,
                        num_classes=ctx.dataset.num_classes, settings=ctx.sampling)

  def record(cert, j):
    return {"sigma": float(cert.sigma[j]), "slack": float(cert.slack[j]), "rate": float(cert.rate)}

  return Plan(fn, ("sigma",), lambda cert, j: {"sigma": repr(float(cert.sigma[j]))},
              describe=f"IDRS, design {design!r}", record=record,
              details=_idrs_details(design))


def _idrs_details(design) -> dict:
  """What ``rsjax verify`` needs of an IDRS design: sigma(x)'s formula and the radius search."""
  from rsjax import idrs
  from rsjax.idrs import _radius
  # The radius search of idrs.certify at its defaults (rtol 1e-4, certified_radius's atol).
  out = {"design": repr(design), "radius_rtol": 1e-4, "radius_atol": 1e-7,
         "xi_margin": _radius.XI_MARGIN,
         "max_noncentrality": _radius.SEARCH_MAX_NONCENTRALITY}
  if isinstance(design, idrs.KnnSigma):
    out.update(kind="knn", sigma_b=design.sigma_b, rate=design.rate, k=design.k, m=design.m,
               eps=design.eps, sigma_min=design.sigma_min, sigma_max=design.sigma_max)
  else:
    out.update(kind="constant", sigma_b=float(design.sigma), rate=0.0)
  return out


# ----------------------------------------------------------------------------- ucan


def save_universal_noise(workdir, *, mu, sigma) -> str:
  """Saves a frozen dataset-wise ``(mu, sigma)`` (UCAN's universal generator) in a workdir.

  ``rsjax certify --method ucan`` certifies with it (``--ucan-sigma auto`` or
  ``dataset``). It is the file ``rsjax.training.ucan.train_ucan`` writes for
  the universal generator (``ucan_noise.npz``, generator ``"universal"``).

  Args:
    workdir: the training workdir of the classifier.
    mu: ``[*input_shape]`` shift.
    sigma: ``[*input_shape]`` scales (> 0), in pixel units (``--sigma`` is not applied).

  Returns:
    The path written.
  """
  from rsjax.anisotropic import FrozenNoise
  from rsjax.training import ucan
  return ucan.save_noise(workdir, FrozenNoise(sigma, mu=mu), "universal")  # checks the arrays


def load_universal_noise(workdir):
  """The noise saved by :func:`save_universal_noise` (or a universal UCAN training), or None.

  Returns:
    ``rsjax.anisotropic.FrozenNoise`` (float32 ``mu``, ``sigma``), or None when
    the workdir holds no frozen noise of the universal generator (none, or a
    pattern's).
  """
  from rsjax.training import ucan
  saved = None if workdir is None else ucan.read_noise(workdir)
  return saved[0] if saved is not None and saved[1] == "universal" else None


def _trained_unsound(workdir) -> bool:
  """Whether ``workdir``'s ``config.json`` marks its training noise as not sound."""
  from rsjax.training import workdir as wd
  if not workdir or not os.path.exists(os.path.join(os.fspath(workdir), wd.CONFIG_FILE)):
    return False
  return wd.read_config(workdir).get("sound", True) is False


def _ucan(ctx: Context, *, ucan_sigma, ucan_pattern, ucan_kappa, ucan_iota) -> Plan:
  if ctx.multiclass and not _gaussian_l2(ctx):
    raise ValueError(f"--multiclass works with Gaussian noise only, not --noise "
                     f"{ctx.sampling.noise.name}")
  from rsjax import anisotropic
  shape = tuple(ctx.dataset.input_shape)
  if ucan_sigma == "auto" and _trained_unsound(ctx.workdir):
    raise ValueError("the model was trained with UCAN's input-dependent generator, which gives no "
                     "certificate (rsjax.training.ucan.certify_input_dependent reports its unsound "
                     "numbers); pass --ucan-sigma pattern to certify the classifier with pattern-wise "
                     "noise instead")
  noise = load_universal_noise(ctx.workdir) if ucan_sigma != "pattern" else None
  if ucan_sigma == "dataset" and noise is None:
    raise ValueError(f"--ucan-sigma dataset needs the universal generator's "
                     f"{UNIVERSAL_NOISE_FILE} in the model directory "
                     "(rsjax.methods.save_universal_noise); use --ucan-sigma pattern")
  if noise is not None:
    if noise.sigma.shape != shape:
      raise ValueError(f"{UNIVERSAL_NOISE_FILE} holds sigma of shape {noise.sigma.shape}, the "
                       f"dataset's inputs are {shape}")
    source = "dataset"
    what = (f"dataset-wise (mu, sigma) from {UNIVERSAL_NOISE_FILE} (sigma in "
            f"[{noise.sigma.min():.4g}, {noise.sigma.max():.4g}])")
  else:
    noise = anisotropic.FrozenNoise(ctx.sigma * anisotropic.pattern_sigma(
        shape, pattern=ucan_pattern, kappa=ucan_kappa, iota=ucan_iota))
    source = "pattern"
    what = (f"pattern-wise sigma = {ctx.sigma} * ({ucan_kappa} ||(a, b)||_{ucan_pattern[1:]}^2 + "
            f"{ucan_iota}) in [{noise.sigma.min():.4g}, {noise.sigma.max():.4g}]")

  def fn(x, ids):
    return anisotropic.certify(ctx.key, ctx.apply_fn, ctx.params, x, sigma=noise, ids=ids,
                               num_classes=ctx.dataset.num_classes, settings=ctx.sampling,
                               multiclass=ctx.multiclass)

  def row(cert, j):
    return {"normalized_radius": repr(float(cert.normalized_radius[j])),
            "alm": repr(float(cert.alm[j])), **_sound_column(cert, j)}

  details = _ucan_details(noise, source,
                          sigma=ctx.sigma, pattern=ucan_pattern, kappa=ucan_kappa, iota=ucan_iota)
  return Plan(fn, ("normalized_radius", "alm", "sound"), row,
              describe=f"UCAN, {what}; radius = min(sigma) * normalized_radius", details=details)


def _ucan_details(noise, source: str, **pattern) -> dict:
  """What ``rsjax verify`` needs of UCAN's frozen ``(mu, sigma)``: the scales' minimum
  (radius = min(sigma) R) and geometric mean (alm), fingerprints of both arrays, and
  the pattern's parameters when sigma is a pattern."""
  from rsjax import record
  sig = np.asarray(noise.sigma, np.float32)
  mu = np.zeros_like(sig) if noise.mu is None else np.asarray(noise.mu, np.float32)
  out = {"source": source, "sigma_min": float(sig.min()),
         "sigma_gmean": float(np.exp(np.mean(np.log(sig.astype(np.float64))))),
         "sigma_fingerprint": record.input_fingerprint(sig),
         "mu_fingerprint": record.input_fingerprint(mu)}
  if source == "pattern":
    out.update(pattern)
  return out


# ----------------------------------------------------------------------------- ddrs


def _ddrs(ctx: Context, *, ddrs_steps, ddrs_lr, ddrs_draws, ddrs_memory) -> Plan:
  from rsjax import ddrs
  if ctx.sampling.noise.name != "gaussian" or ctx.multiclass:
    raise ValueError("--method ddrs certifies with Gaussian noise and the binary radius only")
  if ddrs_steps < 0 or not ddrs_lr >= 0:
    raise ValueError(f"--ddrs-steps and --ddrs-lr must be >= 0, got {ddrs_steps}, {ddrs_lr}")
  memory = ddrs.MemoryCertifier() if ddrs_memory == "on" else None
  # The sigma optimization draws its noise from its own key, independent of the
  # selection and estimation noise (fold_in(key, 0), fold_in(key, 1)) of CERTIFY.
  key_opt = jax.random.fold_in(ctx.key, 2)

  def fn(x, ids):
    sigma = ddrs.optimize_sigma(key_opt, ctx.apply_fn, ctx.params, x, sigma0=ctx.sigma,
                                steps=ddrs_steps, lr=ddrs_lr, num_samples=ddrs_draws, ids=ids)
    return ddrs.certify(ctx.key, ctx.apply_fn, ctx.params, x, sigma=sigma, ids=ids,
                        num_classes=ctx.dataset.num_classes, memory=memory,
                        settings=ctx.sampling)

  def row(cert, j):
    sound = bool(cert.sound)
    return {"sigma": repr(float(cert.sigma[j])), "predict_mc": int(cert.prediction_mc[j]),
            "radius_mc": repr(float(cert.radius_mc[j])), "sound": int(sound)}

  restore = None
  if memory is not None:

    def restore(x, predict, radius):
      c, r = memory.update_batch(x, predict, radius)
      if np.any(c != predict) or np.any(r != radius):
        raise ValueError("the rows already written do not replay into the DDRS memory (another "
                         "run's rows?); start over with --restart")

  mem = ("then the memory-based step (DDRS Alg. 3) in the dataset's order" if memory is not None
         else "WITHOUT the memory: NOT a certificate")
  return Plan(fn, ("sigma", "predict_mc", "radius_mc", "sound"), row,
              describe=(f"DDRS, sigma optimized per input from {ctx.sigma} ({ddrs_steps} steps, "
                        f"lr {ddrs_lr}, {ddrs_draws} draws), Cohen's CERTIFY at it, {mem}"),
              sequential=memory is not None, restore=restore,
              record=lambda cert, j: {"sigma": float(cert.sigma[j])})


# ----------------------------------------------------------------------------- deq


def _deq(ctx: Context, method: str, *, deq_solver, deq_steps, deq_warmup_steps, srs_m,
         srs_check_steps, srs_correction) -> Plan:
  from rsjax import deq
  _binary_gaussian_only(ctx, method)
  if not isinstance(ctx.model, deq.DEQModel):
    raise ValueError(f"--method {'srs' if method == 'srs' else 'deq-standard'} needs a DEQ model "
                     "(trained with --model deq or mdeq)")
  steps = deq_steps if deq_steps is not None else (3 if method == "srs" else 30)
  if method == "srs":
    # --deq-solver sets the chains; warm-up and check solves use Anderson.
    solver = SolverConfig("anderson", srs_check_steps)
    srs = deq.SRSConfig(solver=SolverConfig(deq_solver, steps),
                        warmup=SolverConfig("anderson", deq_warmup_steps), m=srs_m,
                        correction=srs_correction)
  else:
    solver, srs = SolverConfig(deq_solver, steps), None

  def fn(x, ids):
    return deq.certify(ctx.key, ctx.model, None, x, sigma=ctx.sigma, ids=ids, method=method,
                       solver=solver, srs=srs, num_classes=ctx.dataset.num_classes,
                       settings=ctx.sampling)

  if srs is None:
    return Plan(fn, describe=f"DEQ {method} RS, {steps} {deq_solver} steps per sample")

  def record(cert, j):
    # The two-stage bound is a function of these and the counts (rsjax.deq.srs_p_lower).
    return {"check_class": int(cert.check_class[j]), "m_a": int(cert.check_selected[j]),
            "k": int(cert.check_agree[j]), "m": int(cert.check_total)}

  details = {"m": srs.m, "correction": srs.correction, "check": srs.check,
             "sound": bool(srs.sound)}
  return Plan(fn, describe=f"DEQ {method} RS, {steps} {deq_solver} steps per sample",
              record=record, details=details)


def _solver_name(text: str) -> str:
  """A solver name or alias (``naive``, ``A``, ...) -> its registry name."""
  return SolverConfig(name=text).name


_DEQ_OPTIONS = (
    Option("deq_solver", "anderson", "DEQ fixed-point solver (naive: plain iteration)",
           _solver_name, choices=SOLVERS),
    Option("deq_steps", None, "solver steps per sample (default: 30 for deq-standard, 3 for srs)",
           int, positive=True),
)
_SRS_OPTIONS = (
    Option("deq_warmup_steps", 10, "SRS: steps on the first chunk of each chain", int,
           positive=True),
    Option("srs_m", 400, "SRS: check samples re-solved from scratch", int, positive=True),
    Option("srs_check_steps", 30, "SRS: solver steps of the check samples (the certified "
           "classifier)", int, positive=True),
    Option("srs_correction", "paper", "SRS: correction of the bound (the paper's, or the "
           "authors' code)", str, choices=("paper", "authors_code")),
)


def _deq_standard(ctx: Context, **options) -> Plan:
  return _deq(ctx, "standard", **{o.name: o.default for o in _SRS_OPTIONS}, **options)


def _srs(ctx: Context, **options) -> Plan:
  return _deq(ctx, "srs", **options)


# ----------------------------------------------------------------------------- registry


METHODS: dict[str, Method] = {m.name: m for m in (
    Method("cohen", "Cohen et al.'s CERTIFY (Gaussian, Laplace or uniform noise)", _cohen, (
        Option("grid", None, "budgeted CERTIFY for this radius grid (e.g. 0,0.25,0.5,0.75): "
               "stop each input once its certified grid radius is decided, at most --N "
               "samples; adds a 'samples' column", parse_grid),
    )),
    Method("idrs", "input-dependent sigma(x) with the sound IDRS certificate", _idrs, (
        Option("idrs_rate", 0.01, "IDRS semi-elasticity r", float),
        Option("idrs_k", 20, "IDRS nearest neighbours k", int, positive=True),
        Option("idrs_m", None, "IDRS offset m (default by dataset: 1.5 for MNIST, 5 for "
               "CIFAR-10)", float),
    )),
    Method("ucan", "anisotropic (mu, sigma) noise, UCAN's certified region (pattern-wise or "
           "dataset-wise sigma)", _ucan, (
               Option("ucan_sigma", "auto", "dataset: the workdir's saved "
                      f"universal {UNIVERSAL_NOISE_FILE}; pattern: --sigma times the pattern; auto: "
                      "dataset if saved, else pattern", str, choices=("auto", "pattern",
                                                                      "dataset")),
               Option("ucan_pattern", "l2", "norm p of the pattern kappa ||(a, b)||_p^2 + iota",
                      str, choices=("l1", "l2", "linf")),
               Option("ucan_kappa", 0.2, "pattern curvature kappa", float),
               Option("ucan_iota", 0.8, "pattern value iota at the centre", float,
                      positive=True),
           )),
    Method("ddrs", "data-dependent sigma optimized per input, then the memory-based "
           "certification (DDRS)", _ddrs, (
               Option("ddrs_steps", 100, "sigma ascent steps per input", int),
               Option("ddrs_lr", 1e-4, "sigma ascent step size", float),
               Option("ddrs_draws", 1, "noise draws per ascent step", int, positive=True),
               Option("ddrs_memory", "on", "off: no memory, the radius is NOT a certificate",
                      str, choices=("on", "off")),
           )),
    Method("deq-standard", "a DEQ model, every sample solved from scratch", _deq_standard,
           _DEQ_OPTIONS),
    Method("srs", "a DEQ model, serialized randomized smoothing (Gao et al.)", _srs,
           _DEQ_OPTIONS + _SRS_OPTIONS),
)}
