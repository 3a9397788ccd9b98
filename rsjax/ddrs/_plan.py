"""The plan of ``--method ddrs``: sigma optimized per input, then the memory-based certification."""

from __future__ import annotations

import jax
import numpy as np

from rsjax.cohen._certify import certify
from rsjax.ddrs._certify import DDRS, DDRSCertificate
from rsjax.ddrs._memory import MemoryCertifier
from rsjax.ddrs._sigma import optimize_sigma
from rsjax.method import Context, Plan


def build(
  ctx: Context, *, ddrs_steps: int, ddrs_lr: float, ddrs_draws: int, ddrs_memory: str
) -> Plan:
  """Refuses what DDRS cannot certify, else the plan (``rsjax.method.Method.build``)."""
  if ddrs_steps < 0 or not ddrs_lr >= 0:
    raise ValueError(f"--ddrs-steps and --ddrs-lr must be >= 0, got {ddrs_steps}, {ddrs_lr}")
  memory = MemoryCertifier() if ddrs_memory == "on" else None
  # The sigma optimization draws its noise from its own key, independent of the
  # selection and estimation noise (fold_in(key, 0), fold_in(key, 1)) of CERTIFY.
  key_opt = jax.random.fold_in(ctx.key, 2)

  def fn(x, ids):
    sigma = optimize_sigma(
      key_opt,
      ctx.apply_fn,
      ctx.params,
      x,
      sigma0=ctx.sigma,
      steps=ddrs_steps,
      lr=ddrs_lr,
      num_samples=ddrs_draws,
      ids=ids,
      precision=ctx.settings.precision,
    )
    return certify(
      ctx.key,
      ctx.apply_fn,
      ctx.params,
      x,
      sigma=sigma,
      ids=ids,
      certifier=DDRS(memory),
      num_classes=ctx.dataset.num_classes,
      settings=ctx.settings,
    )

  def restore(x, predict, radius):
    c, r = memory.update_batch(x, predict, radius)
    if np.any(c != predict) or np.any(r != radius):
      raise ValueError(
        "the rows already written do not replay into the DDRS memory (another "
        "run's rows?); start over with --restart"
      )

  mem = (
    "then the memory-based step (DDRS Alg. 3) in the dataset's order"
    if memory is not None
    else "WITHOUT the memory: NOT a certificate"
  )
  return Plan(
    fn,
    DDRSCertificate.columns,
    describe=(
      f"DDRS, sigma optimized per input from {ctx.sigma} ({ddrs_steps} steps, "
      f"lr {ddrs_lr}, {ddrs_draws} draws), Cohen's CERTIFY at it, {mem}"
    ),
    sequential=memory is not None,
    restore=restore if memory is not None else None,
  )
