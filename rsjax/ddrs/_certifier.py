"""``--method ddrs``'s :class:`DDRSCertifier`: sigma optimized per input, then the memory."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

from rsjax.cohen._certify import certify_chunk
from rsjax.ddrs._certify import DDRS, DDRSCertificate
from rsjax.ddrs._memory import MemoryCertifier
from rsjax.ddrs._sigma import optimize_sigma
from rsjax.engine.driver import Certificate
from rsjax.runs.method import Context, RunCertifier

__all__ = ["DDRSCertifier"]


@dataclasses.dataclass(frozen=True)
class DDRSCertifier(RunCertifier):
  """``--method ddrs`` (``rsjax.ddrs.METHOD``): each chunk's sigma optimized per input
  (``optimize_sigma``), :class:`DDRS` at it, then the memory (``--ddrs-memory on``: the
  chunks in the dataset's order, ``restore`` replays the rows already written)."""

  memory: MemoryCertifier | None
  key_opt: Any
  ascent: dict

  @classmethod
  def from_options(
    cls, ctx: Context, *, ddrs_steps: int, ddrs_lr: float, ddrs_draws: int, ddrs_memory: str
  ) -> DDRSCertifier:
    if ddrs_steps < 0 or not ddrs_lr >= 0:
      raise ValueError(f"--ddrs-steps and --ddrs-lr must be >= 0, got {ddrs_steps}, {ddrs_lr}")
    memory = MemoryCertifier() if ddrs_memory == "on" else None
    # The sigma optimization draws its noise from its own key, independent of the
    # selection and estimation noise (fold_in(key, 0), fold_in(key, 1)) of CERTIFY.
    key_opt = jax.random.fold_in(ctx.key, 2)
    ascent = {"steps": ddrs_steps, "lr": ddrs_lr, "num_samples": ddrs_draws}
    mem = (
      "then the memory-based step (DDRS Alg. 3) in the dataset's order"
      if memory is not None
      else "WITHOUT the memory: NOT a certificate"
    )
    describe = (
      f"DDRS, sigma optimized per input from {ctx.sigma} ({ddrs_steps} steps, "
      f"lr {ddrs_lr}, {ddrs_draws} draws), Cohen's CERTIFY at it, {mem}"
    )
    return cls(memory, key_opt, ascent, ctx=ctx, columns=DDRSCertificate.columns,
               describe=describe, sequential=memory is not None)  # fmt: skip

  def certify(self, x: Any, ids: Any) -> Certificate:
    ctx = self.ctx
    sigma = optimize_sigma(
      self.key_opt,
      ctx.apply_fn,
      ctx.params,
      x,
      sigma0=ctx.sigma,
      ids=ids,
      precision=ctx.settings.precision,
      **self.ascent,
    )
    return certify_chunk(ctx, DDRS(self.memory), x, ids, sigma=sigma)

  def restore(self, x: Any, predict: Any, radius: Any) -> None:
    assert self.memory is not None  # restore is a sequential certifier's: the memory's
    c, r = self.memory.update_batch(x, predict, radius)
    if np.any(c != predict) or np.any(r != radius):
      raise ValueError(
        "the rows already written do not replay into the DDRS memory (another "
        "run's rows?); start over with --restart"
      )
