"""Certification of DEQs: the certifiers ``SRS`` (serialized RS) and ``StandardRS`` of
``rsjax.certify`` and of ``--method srs`` and ``--method deq-standard``, and ``certify``,
their alias.

Standard RS certifies the DEQ solved from z = 0 with a fixed solver ("30A") for
every sample: Cohen's CERTIFY applied to ``DEQApply``. SRS (Gao et al. 2024)
samples with warm-started chains and certifies the same classifier with the
two-stage correlation-eliminated certificate.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from flax import nnx

from rsjax import stats
from rsjax.cohen._certify import Batch, Cohen, certify_with
from rsjax.engine.counts import prepare_inputs
from rsjax.engine.driver import Certificate, Sampling, run_certify
from rsjax.models import DEQApply, DEQModel, SolverConfig, as_solver_config, to_deq_fn
from rsjax.runs.method import Certifier, Context
from rsjax.srs._bound import SRSCertificate, srs_certificate
from rsjax.srs._srs import SRSConfig, srs_sample
from rsjax.util import check_int, scale_per_input

if TYPE_CHECKING:
  from jax.typing import ArrayLike

__all__ = ["SRS", "StandardRS", "certify", "MODES"]

#: The ways :func:`certify` samples a DEQ (its ``method=``; the certifiers ``SRS`` and
#: ``StandardRS``, and the registry's ``srs`` and ``deq-standard``).
MODES = ("srs", "standard")


def _describe(cfg: SolverConfig) -> str:
  return f"{cfg.steps} {cfg.name} step{'s' if cfg.steps != 1 else ''}"


def _prepare(deq: Any, params: Any, settings: Sampling) -> tuple[Callable, Any]:
  """``(deq_fn, params)`` of a DEQ module or function; refuses ``batch_size="auto"``."""
  settings.fixed_batch("DEQ certification")
  if isinstance(deq, nnx.Module):
    if params is not None:
      raise ValueError("params must be None when deq is an NNX module (its variables are used)")
    return to_deq_fn(deq)
  if callable(deq):
    return deq, params
  raise ValueError(f"deq must be a DEQ NNX module or a deq_fn callable, got {type(deq)}")


class _DEQRun(Certifier):
  """What ``--method srs`` and ``--method deq-standard`` share: the run's DEQ model is the
  classifier (``(ctx.model, None)``)."""

  def classifier(self, ctx: Context) -> tuple[Any, None]:
    return ctx.model, None

  @staticmethod
  def _solver(ctx: Context, name: str, deq_solver: str, steps: int) -> SolverConfig:
    """The run's chain solver; refuses a model that is not a DEQ."""
    if not isinstance(ctx.model, DEQModel):
      raise ValueError(f"--method {name} needs a DEQ model (trained with --model deq or mdeq)")
    return SolverConfig(deq_solver, steps)


@dataclasses.dataclass(frozen=True)
class SRS(_DEQRun):
  """Serialized randomized smoothing (Gao et al. 2024) as a certifier of ``rsjax.certify``.

  Samples with warm-started chains (``rsjax.srs.srs_sample``) and check samples
  re-solved with the full solver, and certifies with the two-stage
  correlation-eliminated certificate of ``rsjax.srs._bound``
  (``srs_certificate``; why it holds is stated there). It certifies the same base
  classifier as :class:`StandardRS`: the DEQ solved from z = 0 with ``solver``.
  Keys: ``fold_in(key, 0)`` (selection), ``fold_in(key, 1)`` (estimation),
  ``fold_in(key, 2)`` (check positions); the selection and estimation noise are
  Cohen's with the same key, so standard RS and SRS see the same noisy inputs.

  Attributes:
    solver: the certified classifier's solver (a ``SolverConfig`` or a name;
      default 30 Anderson steps, "30A"); it replaces ``srs.check_solver``.
    srs: the chains and check samples (``SRSConfig``: chain and warm-up solvers,
      ``m`` check samples, check positions, correction; default ``SRSConfig()``).
  """

  solver: SolverConfig | str | None = None
  srs: SRSConfig | None = None

  @classmethod
  def from_options(
    cls,
    ctx: Context,
    *,
    deq_solver: str,
    deq_steps: int | None,
    deq_warmup_steps: int,
    deq_warmup_solver: str,
    srs_m: int,
    srs_check_steps: int,
    srs_correction: str,
  ) -> SRS:
    """``--method srs`` (``rsjax.srs.SRS_METHOD``): ``--deq-solver`` sets the chains,
    ``--deq-warmup-solver`` their first chunk; the check samples use Anderson."""
    chains = cls._solver(ctx, "srs", deq_solver, 3 if deq_steps is None else deq_steps)
    ctx.settings.fixed_batch("DEQ certification")  # the chains: a number, part of the run
    warmup = SolverConfig(deq_warmup_solver, deq_warmup_steps)
    srs = SRSConfig(solver=chains, warmup=warmup, m=srs_m, correction=srs_correction)
    return cls(SolverConfig("anderson", srs_check_steps), srs)

  def describe(self, ctx: Context) -> str:
    chains = (self.srs or SRSConfig()).solver
    return f"DEQ srs RS, {chains.steps} {chains.name} steps per sample"

  def details(self, ctx: Context) -> dict:
    # The chains (batch_size) change which noise each chain's warm start carries, so the
    # counts: unlike for every other method, the batch size is part of an SRS run.
    srs = self.srs or SRSConfig()
    return {
      "m": srs.m,
      "correction": srs.correction,
      "check": srs.check,
      "sound": bool(srs.sound),
      "chains": ctx.settings.fixed_batch("DEQ certification"),
    }

  def certify(self, batch: Batch) -> SRSCertificate:
    """Certifies a batch with serialized RS.

    Args:
      batch: the inputs ``x [B, *input_shape]`` in [0, 1], noise and settings (an
        ``rsjax.cohen.Batch``; an integer ``batch_size``: the number of parallel chains).
        Its ``apply_fn`` is a DEQ NNX module (``DEQClassifier``; ``params`` None) or a pure
        ``deq_fn(params, x, z0, solver) -> (logits, SolverResult)`` with its ``params``.

    Returns:
      An ``SRSCertificate`` whose ``guarantee`` names the method and the certified
      classifier; ``sound`` is False for the authors' code's bound or consecutive
      check positions.
    """
    settings, num_classes = batch.settings, batch.num_classes
    deq_fn, params = _prepare(batch.apply_fn, batch.params, settings)
    srs = SRSConfig() if self.srs is None else self.srs
    if self.solver is not None:
      srs = srs.replace(check_solver=as_solver_config(self.solver))
    n, alpha = settings.n, settings.alpha
    check_int("m", srs.m)
    stats.check_sample_size(srs.m, alpha / 2)
    x_np, sig, ids_arr = prepare_inputs(batch.x, batch.sigma, batch.ids)

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
      f"{min(settings.fixed_batch('DEQ certification'), n)})"
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
      guarantee = cert.guarantee
      if srs.check != "random" and srs.correction == "paper":
        guarantee += (
          "; WARNING: check='consecutive' positions are not random, the argument above does "
          "not apply"
        )
      if aniso:
        guarantee += "; anisotropic sigma: isotropic radius min(sigma) * R"
      return dataclasses.replace(
        cert,
        guarantee=guarantee,
        sound=srs.sound,
        residual=np.asarray(est.residual, np.float64),
        check_residual=np.asarray(est.check_residual, np.float64),
      )

    return run_certify(batch.key, counts, rule, settings, tests=2)


@dataclasses.dataclass(frozen=True)
class StandardRS(_DEQRun):
  """Standard randomized smoothing of a DEQ as a certifier of ``rsjax.certify``: Cohen's
  CERTIFY of ``DEQApply``, the DEQ solved from z = 0 with ``solver`` for every sample.

  Attributes:
    solver: the solver (a ``SolverConfig`` or a name; default 30 Anderson steps).
  """

  solver: SolverConfig | str | None = None

  @classmethod
  def from_options(cls, ctx: Context, *, deq_solver: str, deq_steps: int | None) -> StandardRS:
    """``--method deq-standard`` (``rsjax.srs.STANDARD_METHOD``)."""
    steps = 30 if deq_steps is None else deq_steps
    return cls(cls._solver(ctx, "deq-standard", deq_solver, steps))

  def describe(self, ctx: Context) -> str:
    cfg = as_solver_config(self.solver or SolverConfig("anderson", 30))
    return f"DEQ standard RS, {cfg.steps} {cfg.name} steps per sample"

  def certify(self, batch: Batch) -> Certificate:
    """Certifies a batch with standard RS (every sample solved from scratch).

    Args:
      batch: the inputs ``x [B, *input_shape]`` in [0, 1], noise and settings (an
        ``rsjax.cohen.Batch``; an integer ``batch_size``). Its ``apply_fn`` is a DEQ NNX
        module (``DEQClassifier``; ``params`` None) or a pure
        ``deq_fn(params, x, z0, solver) -> (logits, SolverResult)`` with its ``params``.

    Returns:
      A ``Certificate`` whose ``guarantee`` names the certified classifier.
    """
    deq_fn, params = _prepare(batch.apply_fn, batch.params, batch.settings)
    cfg = SolverConfig("anderson", 30) if self.solver is None else as_solver_config(self.solver)
    cert = Cohen().certify(batch.replace(apply_fn=DEQApply(deq_fn, cfg), params=params))
    return dataclasses.replace(
      cert,
      guarantee=cert.guarantee + f"; base classifier: the DEQ solved from z = 0 with "
      f"{_describe(cfg)} (standard RS, every sample from scratch)",
    )


def _deq(
  sigma: ArrayLike,
  method: str = "srs",
  solver: SolverConfig | str | None = None,
  srs: SRSConfig | None = None,
) -> tuple[SRS | StandardRS, ArrayLike]:
  """``certify(..., method="srs", solver=None, srs=None)``: ``SRS(solver, srs)`` or
  ``StandardRS(solver)`` (``method="standard"``)."""
  if method not in MODES:
    raise ValueError(f"method must be one of {MODES}, got {method!r}")
  if method == "standard" and srs is not None:
    raise ValueError("srs= configures SRS's chains: not with method='standard'")
  return (SRS(solver, srs) if method == "srs" else StandardRS(solver)), sigma


#: ``rsjax.certify(key, deq, params, x, certifier=SRS(solver, srs))`` (``method="srs"``) or
#: ``certifier=StandardRS(solver)`` (``method="standard"``) as ``certify(key, deq, params, x,
#: sigma=, method="srs", solver=None, srs=None, ...)``: see :class:`SRS`.
certify = functools.partial(certify_with, _deq)
