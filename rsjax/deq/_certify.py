"""Certification of DEQs: ``certify`` (standard RS or serialized RS) and the
certifiers ``SRS`` and ``StandardRS``.

Standard RS (``method="standard"``) certifies the DEQ solved from z = 0 with a
fixed solver ("30A") for every sample: it is the core engine
(``rsjax.certify``) applied to ``DEQApply``.

SRS (``method="srs"``, Gao et al. 2024) samples with warm-started chains
(``rsjax.deq.srs_sample``) and check samples re-solved with the full solver, and
certifies with the two-stage correlation-eliminated certificate of
``rsjax.deq._bound`` (``srs_certificate``; why it holds is stated there).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from flax import nnx

from rsjax import stats
from rsjax.cohen._certify import certify as cohen_certify
from rsjax.deq._bound import SRSCertificate, srs_certificate
from rsjax.deq._srs import SRSConfig, srs_sample
from rsjax.engine.counts import prepare_inputs
from rsjax.engine.driver import Certificate, Sampling, run_certify
from rsjax.models import DEQApply, SolverConfig, as_solver_config, to_deq_fn
from rsjax.util import check_int, scale_per_input

if TYPE_CHECKING:
  import jax
  from jax.typing import ArrayLike

__all__ = [
  "SRS",
  "StandardRS",
  "certify",
  "MODES",
]

#: The ways :func:`certify` samples a DEQ (its ``method=``; the certifiers ``SRS`` and
#: ``StandardRS``, and the registry's ``srs`` and ``deq-standard``).
MODES = ("srs", "standard")


def _describe(cfg: SolverConfig) -> str:
  return f"{cfg.steps} {cfg.name} step{'s' if cfg.steps != 1 else ''}"


def _as_deq_fn(deq, params):
  if isinstance(deq, nnx.Module):
    if params is not None:
      raise ValueError("params must be None when deq is an NNX module (its variables are used)")
    return to_deq_fn(deq)
  if callable(deq):
    return deq, params
  raise ValueError(f"deq must be a DEQ NNX module or a deq_fn callable, got {type(deq)}")


def certify(
  key: jax.Array | int,
  deq: Any,
  params: Any,
  x: ArrayLike,
  *,
  sigma: ArrayLike,
  num_classes: int,
  method: str = "srs",
  solver: SolverConfig | str | None = None,
  srs: SRSConfig | None = None,
  settings: Sampling | None = None,
  ids: ArrayLike | None = None,
  **sampling: Any,
) -> Certificate:
  """Certifies a DEQ classifier with standard RS or serialized RS (SRS).

  Both methods certify the same base classifier, the DEQ solved from z = 0
  with ``solver`` (default 30 Anderson steps, "30A"): standard RS solves every
  sample so; SRS samples with warm-started chains (``srs``) and re-solves its
  check samples so.

  Keys: ``fold_in(key, 0)`` (selection), ``fold_in(key, 1)`` (estimation),
  ``fold_in(key, 2)`` (check positions), from the driver ``rsjax.run_certify``.
  The selection and estimation noise are those of ``rsjax.certify`` with the
  same key, so standard RS and SRS see the same noisy inputs, and one key
  serves every chunk of a dataset.

  Args:
    key: ``jax.random.key`` or int seed.
    deq: a DEQ NNX module (``DEQClassifier``; pass ``params=None``) or a pure
      ``deq_fn(params, x, z0, solver) -> (logits, SolverResult)``.
    params: variables of ``deq_fn`` (None for a module).
    x: ``[B, *input_shape]`` inputs in [0, 1].
    sigma: float, ``[B]`` or ``[B, *input_shape]`` noise scale.
    num_classes: number of classes C.
    method: ``"srs"`` or ``"standard"``.
    solver: the solver of the certified classifier (a ``SolverConfig`` or a
      name; default ``SolverConfig("anderson", 30)``). With SRS it replaces
      ``srs.check_solver``.
    srs: an :class:`SRSConfig` (chain and warm-up solvers, ``m`` check samples,
      check positions, correction); default ``SRSConfig()``.
    settings: an ``rsjax.Sampling``; with SRS ``batch_size`` is the number of
      parallel chains.
    ids: ``[B]`` dataset indices (reproducible noise per input).
    **sampling: ``rsjax.Sampling`` fields as keywords (override ``settings``).

  Returns:
    A ``Certificate`` (an ``SRSCertificate`` for SRS) whose ``guarantee`` names
    the method and the certified classifier; ``sound`` is False for the
    authors' code's bound or consecutive check positions.
  """
  if method not in MODES:
    raise ValueError(f"method must be one of {MODES}, got {method!r}")
  settings = Sampling.of(settings, **sampling)
  if settings.batch_size == "auto":
    raise ValueError("DEQ certification needs an integer batch_size, not 'auto'")
  deq_fn, params = _as_deq_fn(deq, params)
  if solver is not None:
    solver = as_solver_config(solver)

  if method == "standard":
    cfg = solver or SolverConfig("anderson", 30)
    cert = cohen_certify(
      key,
      DEQApply(deq_fn, cfg),
      params,
      x,
      sigma=sigma,
      num_classes=num_classes,
      settings=settings,
      ids=ids,
    )
    return dataclasses.replace(
      cert,
      guarantee=cert.guarantee + f"; base classifier: the DEQ solved from z = 0 with "
      f"{_describe(cfg)} (standard RS, every sample from scratch)",
    )

  srs = SRSConfig() if srs is None else srs
  if solver is not None:
    srs = srs.replace(check_solver=solver)
  n, alpha = settings.n, settings.alpha
  check_int("m", srs.m)
  stats.check_sample_size(srs.m, alpha / 2)
  x_np, sig, ids_arr = prepare_inputs(x, sigma, ids)

  def counts(key, num, selection=None, aux_key=None):
    cfg = srs if selection is not None else srs.replace(m=0)
    return srs_sample(
      key,
      deq_fn,
      params,
      x_np,
      sigma=sig,
      num_classes=num_classes,
      num=num,
      config=cfg,
      settings=settings,
      check_key=aux_key,
      ids=ids_arr,
    )

  scale, aniso = scale_per_input(sig)
  desc = (
    f"the DEQ solved from z = 0 with {_describe(srs.check_solver)} (SRS chains: "
    f"{_describe(srs.warmup)} warm-up, then {_describe(srs.solver)} per chunk of "
    f"{min(settings.batch_size, n)})"
  )

  def rule(sel, est):
    cert = srs_certificate(
      sel.counts,
      est.counts,
      est.srs_labels,
      est.check_labels,
      n=n,
      alpha=alpha,
      scale=scale,
      dim=int(np.prod(x_np.shape[1:])),
      noise=settings.noise,
      correction=srs.correction,
      description=desc,
    )
    cert = dataclasses.replace(
      cert,
      residual=np.asarray(est.residual, np.float64),
      check_residual=np.asarray(est.check_residual, np.float64),
    )
    if srs.check != "random" and srs.correction == "paper":
      cert = dataclasses.replace(
        cert,
        guarantee=cert.guarantee + "; WARNING: check='consecutive' "
        "positions are not random, the argument above does not apply",
      )
    if aniso:
      cert = dataclasses.replace(
        cert, guarantee=cert.guarantee + "; anisotropic sigma: isotropic radius min(sigma) * R"
      )
    return dataclasses.replace(cert, sound=srs.sound)

  return run_certify(key, counts, rule, settings, tests=2)


@dataclasses.dataclass(frozen=True)
class SRS:
  """Serialized randomized smoothing as a certifier of ``rsjax.certify`` (``apply_fn``: the
  DEQ model, ``params`` None).

  Attributes:
    solver: the certified classifier's solver (default 30 Anderson steps).
    srs: the chains and check samples (``SRSConfig``; default ``SRSConfig()``).
  """

  solver: SolverConfig | str | None = None
  srs: SRSConfig | None = None

  def certify(
    self,
    key: jax.Array | int,
    apply_fn: Callable,
    params: Any,
    x: ArrayLike,
    *,
    sigma: Any,
    num_classes: int,
    settings: Sampling,
    ids: ArrayLike | None = None,
  ) -> SRSCertificate:
    return certify(
      key,
      apply_fn,
      params,
      x,
      sigma=sigma,
      num_classes=num_classes,
      method="srs",
      solver=self.solver,
      srs=self.srs,
      settings=settings,
      ids=ids,
    )


@dataclasses.dataclass(frozen=True)
class StandardRS:
  """Standard randomized smoothing of a DEQ (every sample solved from scratch) as a certifier
  of ``rsjax.certify`` (``apply_fn``: the DEQ model, ``params`` None).

  Attributes:
    solver: the solver (default 30 Anderson steps).
  """

  solver: SolverConfig | str | None = None

  def certify(
    self,
    key: jax.Array | int,
    apply_fn: Callable,
    params: Any,
    x: ArrayLike,
    *,
    sigma: Any,
    num_classes: int,
    settings: Sampling,
    ids: ArrayLike | None = None,
  ) -> Certificate:
    return certify(
      key,
      apply_fn,
      params,
      x,
      sigma=sigma,
      num_classes=num_classes,
      method="standard",
      solver=self.solver,
      settings=settings,
      ids=ids,
    )
