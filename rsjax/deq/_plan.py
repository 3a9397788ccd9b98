"""The plans of ``--method srs`` and ``--method deq-standard``: a DEQ model, solved per sample."""

from __future__ import annotations

from rsjax.cohen._certify import certify
from rsjax.deq._bound import SRSCertificate
from rsjax.deq._certify import SRS, StandardRS
from rsjax.deq._srs import SRSConfig
from rsjax.method import Context, Plan
from rsjax.models import DEQModel, SolverConfig


def build(
  ctx: Context,
  method: str,
  *,
  deq_solver: str,
  deq_steps: int | None,
  deq_warmup_steps: int,
  srs_m: int,
  srs_check_steps: int,
  srs_correction: str,
) -> Plan:
  """Refuses what the DEQ methods cannot certify, else the plan of ``method`` (``"srs"`` or
  ``"standard"``; ``rsjax.method.Method.build``)."""
  name = "srs" if method == "srs" else "deq-standard"
  if not isinstance(ctx.model, DEQModel):
    raise ValueError(f"--method {name} needs a DEQ model (trained with --model deq or mdeq)")
  steps = deq_steps if deq_steps is not None else (3 if method == "srs" else 30)
  if method == "srs":
    # --deq-solver sets the chains; warm-up and check solves use Anderson.
    solver = SolverConfig("anderson", srs_check_steps)
    srs = SRSConfig(
      solver=SolverConfig(deq_solver, steps),
      warmup=SolverConfig("anderson", deq_warmup_steps),
      m=srs_m,
      correction=srs_correction,
    )
  else:
    solver, srs = SolverConfig(deq_solver, steps), None
  certifier = SRS(solver, srs) if srs is not None else StandardRS(solver)

  def fn(x, ids):
    return certify(
      ctx.key,
      ctx.model,
      None,
      x,
      sigma=ctx.sigma,
      ids=ids,
      certifier=certifier,
      num_classes=ctx.dataset.num_classes,
      settings=ctx.settings,
    )

  describe = f"DEQ {method} RS, {steps} {deq_solver} steps per sample"
  if srs is None:
    return Plan(fn, SRSCertificate.columns, describe=describe)
  # The chains (batch_size) change which noise each chain's warm start carries, so the
  # counts: unlike for every other method, the batch size is part of an SRS run.
  details = {
    "m": srs.m,
    "correction": srs.correction,
    "check": srs.check,
    "sound": bool(srs.sound),
    "chains": ctx.settings.batch_size,
  }
  return Plan(fn, SRSCertificate.columns, describe=describe, details=details)
