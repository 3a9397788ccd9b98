"""DDRS's CERTIFY at per-input optimized sigma, then the memory (the certifier :class:`DDRS`
of ``rsjax.certify`` and :func:`certify`, its alias); a resumable dataset run."""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import jax
import numpy as np

from rsjax.cohen._certify import Cohen, certify_with
from rsjax.ddrs._memory import MemoryCertifier
from rsjax.ddrs._objective import SigmaAscent
from rsjax.ddrs._sigma import optimize_sigma
from rsjax.engine.counts import prepare_inputs
from rsjax.engine.driver import Certificate, Sampling
from rsjax.method import Plan
from rsjax.util import as_key

if TYPE_CHECKING:
  from jax.typing import ArrayLike

__all__ = [
  "DDRSCertificate",
  "MC_COLUMNS",
  "MEMORY_COLUMNS",
  "certify",
  "certify_dataset",
  "memory_path",
  "DDRS",
]

_NOT_A_CERTIFICATE = (
  "NOT A CERTIFICATE of a fixed classifier: Cohen's radius (binary, one-sided "
  "Clopper-Pearson) at a sigma optimized for each input (DDRS); the smoothed classifier changes "
  "with sigma, so the radius is not sound for any fixed smoothed classifier (Súkeník et al., "
  "IDRS App. C). Use the memory (DDRS memory-based guarantee) or rsjax.idrs for a sound "
  "input-dependent certificate"
)
_MEMORY_GUARANTEE = (
  "DDRS memory-based guarantee (Alfarra et al. 2022, Algorithm 3): Cohen's radius (binary "
  "Gaussian L2, one-sided Clopper-Pearson) at the per-input optimized sigma, post-processed so "
  "that certified balls of different classes never intersect; valid only for this deployment "
  "run and this input order (the memory's earlier inputs), not a certificate of a fixed "
  "smoothed classifier"
)


@dataclasses.dataclass(frozen=True)
class DDRSCertificate(Certificate):
  """A ``Certificate`` at per-input optimized sigma, optionally after the memory.

  Attributes:
    sigma: ``[B]`` float64 sigma used at each input.
    prediction_mc: ``[B]`` Monte-Carlo prediction before the memory.
    radius_mc: ``[B]`` Monte-Carlo radius before the memory.
    memory_used: whether a ``MemoryCertifier`` post-processed the result.
  """

  sigma: np.ndarray | None = None
  prediction_mc: np.ndarray | None = None
  radius_mc: np.ndarray | None = None
  memory_used: bool = False

  columns: ClassVar[tuple[str, ...]] = ("sigma", "predict_mc", "radius_mc", "sound")

  def row_fields(self, j: int) -> dict:
    return {
      "sigma": repr(float(self.sigma[j])),
      "predict_mc": int(self.prediction_mc[j]),
      "radius_mc": repr(float(self.radius_mc[j])),
      "sound": int(bool(self.sound)),
    }

  def record_fields(self, j: int) -> dict:
    return {"sigma": float(self.sigma[j])}


MC_COLUMNS = ("sigma",)
MEMORY_COLUMNS = ("sigma", "predict_mc", "radius_mc", "memory_changed")


@dataclasses.dataclass(frozen=True)
class _MonteCarloCertificate(DDRSCertificate):
  """The rows of :func:`certify_dataset`'s Monte-Carlo file (``MC_COLUMNS``)."""

  columns: ClassVar[tuple[str, ...]] = MC_COLUMNS

  def row_fields(self, j: int) -> dict:
    return {"sigma": repr(float(self.sigma[j]))}


@dataclasses.dataclass(frozen=True)
class DDRS:
  """DDRS (Alfarra et al. 2022) as a certifier of ``rsjax.certify``: Cohen's CERTIFY at
  per-input sigma (``sigma``: ``[B]``, e.g. from ``optimize_sigma``; DDRS's
  ``certify_ds``), then the optional memory.

  Attributes:
    memory: a ``MemoryCertifier`` (updated in place, in the inputs' order), or
      None: Cohen's radius at the optimized sigma, NOT a certificate.
  """

  memory: MemoryCertifier | None = None

  def certify(
    self,
    key: jax.Array | int,
    apply_fn: Callable,
    params: Any,
    x: ArrayLike,
    *,
    sigma: ArrayLike,
    num_classes: int,
    settings: Sampling,
    ids: ArrayLike | None = None,
  ) -> DDRSCertificate:
    """Certifies a batch at its per-input sigma, then passes it through the memory.

    Args:
      key: ``jax.random.key`` or int seed (selection and estimation keys
        ``fold_in(key, 0)`` / ``fold_in(key, 1)``, as Cohen's).
      apply_fn: ``apply_fn(params, x) -> logits``.
      params: pytree for ``apply_fn``.
      x: ``[B, *input_shape]`` inputs.
      sigma: ``[B]`` per-input sigma.
      num_classes: number of classes C.
      settings: an ``rsjax.Sampling``. Its noise is Gaussian (L2) or
        ``"uniform"`` (the L1 variant: sigma is the half-width lambda, radius
        ``2 lambda (p_A_lower - 1/2)``, Yang et al.). The memory needs Gaussian
        noise (it works with L2 balls).
      ids: ``[B]`` dataset indices.

    Returns:
      ``DDRSCertificate``; ``guarantee`` says what (little) it guarantees, and
      ``sound`` is True only with the memory (its deployment-run guarantee).

    Raises:
      ValueError: for bad arguments.
    """
    x_np, _, _ = prepare_inputs(x, 1.0, ids)
    sig = np.asarray(sigma, np.float32)
    if sig.shape != (x_np.shape[0],):
      raise ValueError(f"sigma must have shape [B]={(x_np.shape[0],)}, got {sig.shape}")
    if self.memory is not None and not isinstance(self.memory, MemoryCertifier):
      raise ValueError(f"memory must be a MemoryCertifier or None, got {self.memory!r}")
    if self.memory is not None and settings.noise.norm != "l2":
      raise ValueError("the memory works with L2 balls: use Gaussian noise (noise=None) with it")
    base = Cohen().certify(
      key, apply_fn, params, x_np, sigma=sig, num_classes=num_classes, settings=settings, ids=ids
    )
    pred, rad = base.prediction, base.radius
    if self.memory is None:
      guarantee = _NOT_A_CERTIFICATE + f" (alpha={settings.alpha}, {settings.noise.name} noise)"
    else:
      pred, rad = self.memory.update_batch(x_np, pred, rad)
      guarantee = _MEMORY_GUARANTEE + f" (alpha={settings.alpha} per input)"
    return DDRSCertificate(
      prediction=np.asarray(pred, np.int64),
      radius=np.asarray(rad, np.float64),
      p_lower=base.p_lower,
      counts=base.counts,
      counts_selection=base.counts_selection,
      norm=base.norm,
      guarantee=guarantee,
      sound=self.memory is not None,
      sigma=sig.astype(np.float64),
      prediction_mc=base.prediction,
      radius_mc=base.radius,
      memory_used=self.memory is not None,
    )


def _ddrs(sigma: ArrayLike, memory: MemoryCertifier | None = None) -> tuple[DDRS, ArrayLike]:
  """``certify(..., sigma=, memory=None)``: ``DDRS(memory)`` at the per-input ``sigma``."""
  return DDRS(memory), sigma


#: ``rsjax.certify(key, apply_fn, params, x, sigma=sigma, certifier=DDRS(memory), ...)`` as
#: ``certify(key, apply_fn, params, x, sigma=, memory=None, ...)``: see :class:`DDRS`.
certify = functools.partial(certify_with, _ddrs)


def memory_path(out_path: str | os.PathLike) -> str:
  """The Monte-Carlo rows (before the memory) of :func:`certify_dataset`'s ``out_path``."""
  return os.fspath(out_path) + ".mc.tsv"


def certify_dataset(
  key: jax.Array | int,
  apply_fn: Callable,
  params: Any,
  get_batch: Callable,
  indices: ArrayLike,
  out_path: str | os.PathLike,
  *,
  sigma0: float,
  num_classes: int,
  ascent: SigmaAscent | None = None,
  settings: Sampling | None = None,
  memory: bool = True,
  **run_options: Any,
) -> dict:
  """DDRS for a dataset: optimize sigma per input, CERTIFY with it, then the memory.

  1. For each chunk of ``indices`` (in order): ``optimize_sigma`` (key
     ``fold_in(key, 2)``), then Cohen's CERTIFY at the optimized sigma (``key``);
     the rows, with the per-input ``sigma`` column, go to
     ``memory_path(out_path)`` (``<out>.mc.tsv``), resumably (``rsjax.runner``).
  2. With ``memory``, the memory step (Algorithm 3) over those rows in the file's
     order (= the order of ``indices``, recorded in the row order of
     ``out_path``), written to ``out_path`` with columns ``sigma``,
     ``predict_mc``, ``radius_mc``, ``memory_changed``. It is recomputed from
     the Monte-Carlo rows on every call (it is cheap and deterministic).

  Guarantee: the rows of ``out_path`` carry the DDRS memory-based guarantee (for
  this deployment run and this order). The Monte-Carlo rows alone are NOT a
  certificate of any fixed smoothed classifier (``certify``'s docstring).

  Args:
    key: ``jax.random.key`` or int seed.
    apply_fn, params: the classifier.
    get_batch: ``get_batch(indices) -> (x [b, ...], labels [b])``.
    indices: dataset indices, in the processing order.
    out_path: final result file (Cohen's format plus the columns above).
    sigma0: the starting sigma of the ascent.
    num_classes: C.
    ascent: a ``SigmaAscent`` (default the paper's settings); with
      ``family="uniform"`` the noise is uniform (L1).
    settings: an ``rsjax.Sampling`` of CERTIFY; its precision is also the
      ascent's (the classifier is computed alike in both).
    memory: run the memory step (False: only the Monte-Carlo rows).
    **run_options: ``rsjax.runner.certify_dataset`` options: ``inputs_per_call``
      (default 8), ``progress``, ``resume`` (keep the Monte-Carlo rows already
      written), and ``run`` (extra identity of the run for the result files).

  Returns:
    ``{"mc_path", "out_path" (None without memory), "changed": number of
    certificates the memory changed, "guarantee"}``.
  """
  from rsjax import io, runner

  key = as_key(key)
  k_opt = jax.random.fold_in(key, 2)
  ascent = SigmaAscent.of(ascent)
  settings = Sampling.of(settings)
  if ascent.family == "uniform":
    settings = settings.replace(noise="uniform")
  run_options.setdefault("inputs_per_call", 8)
  run = dict(
    method="ddrs",
    model=runner.fingerprint(params),
    sigma0=float(sigma0),
    steps=ascent.steps,
    lr=ascent.lr,
    num_samples=ascent.num_samples,
    clip=list(ascent.clip),
    parametrization=ascent.parametrization,
    family=ascent.family,
    n0=settings.n0,
    n=settings.n,
    alpha=settings.alpha,
    precision=settings.precision,
    key=np.asarray(jax.random.key_data(key)).tolist(),
    **(run_options.pop("run", None) or {}),
  )

  def fn(x, ids):
    sig = optimize_sigma(
      k_opt,
      apply_fn,
      params,
      x,
      sigma0=sigma0,
      config=ascent,
      ids=ids,
      precision=settings.precision,
    )
    return DDRS().certify(
      key, apply_fn, params, x, sigma=sig, num_classes=num_classes, settings=settings, ids=ids
    )

  def mc_rows(x, ids):  # the Monte-Carlo rows: the sigma column only
    cert = fn(x, ids)
    return _MonteCarloCertificate(
      **{f.name: getattr(cert, f.name) for f in dataclasses.fields(cert)}
    )

  mc = memory_path(out_path)
  runner.certify_dataset(Plan(mc_rows, MC_COLUMNS), get_batch, indices, mc, run=run, **run_options)
  out = {"mc_path": mc, "out_path": None, "changed": 0, "guarantee": _NOT_A_CERTIFICATE}
  if not memory:
    return out
  rows = io.read_certify(mc)
  x, _ = get_batch(rows.idx)
  mem = MemoryCertifier()
  pred, rad = mem.update_batch(np.asarray(x), rows.predict, rows.radius)
  changed = (pred != rows.predict) | (rad != rows.radius)
  with io.ResultsWriter(
    out_path,
    kind="certify",
    resume=False,
    extra_columns=MEMORY_COLUMNS,
    run=dict(run, memory=True, guarantee=_MEMORY_GUARANTEE),
  ) as w:
    for j in range(len(rows)):
      w.write(
        idx=int(rows.idx[j]),
        label=int(rows.label[j]),
        predict=int(pred[j]),
        radius=float(rad[j]) if pred[j] >= 0 else 0.0,
        time=float(rows.time[j]),
        sigma=repr(float(rows.extra["sigma"][j])),
        predict_mc=int(rows.predict[j]),
        radius_mc=repr(float(rows.radius[j])),
        memory_changed=int(changed[j]),
      )
  return dict(
    out, out_path=os.fspath(out_path), changed=int(changed.sum()), guarantee=_MEMORY_GUARANTEE
  )
