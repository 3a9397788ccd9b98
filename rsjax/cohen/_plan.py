"""The plan of ``--method cohen``: Cohen et al.'s CERTIFY, fixed or budgeted on a radius grid."""

from __future__ import annotations

import math

from rsjax import lattice
from rsjax.checks import thresholds_digest
from rsjax.cohen._certify import certify
from rsjax.engine.anytime import Anytime, anytime_decisions
from rsjax.engine.budget import Budget, BudgetedCertificate
from rsjax.engine.driver import Certificate
from rsjax.method import Context, Plan


def build(ctx: Context, *, grid: tuple[float, ...] | None, budget_rule: str = "looks") -> Plan:
  """Refuses what Cohen's radius cannot do, else the plan (``rsjax.method.Method.build``)."""
  noise = ctx.settings.noise  # the claim is legal (Method.plan: rsjax.checks.refusal)
  rule = None
  if grid is not None:
    rule = Anytime(grid=tuple(grid)) if budget_rule == "anytime" else Budget(grid=tuple(grid))

  def fn(x, ids):
    return certify(
      ctx.key,
      ctx.apply_fn,
      ctx.params,
      x,
      sigma=ctx.sigma,
      ids=ids,
      num_classes=ctx.dataset.num_classes,
      settings=ctx.settings,
      multiclass=ctx.multiclass,
      budget=rule,
    )

  what = f"Cohen et al.'s CERTIFY, {noise.name} noise, sigma={ctx.sigma}"
  # Sound 8-bit noise: the record names its threshold table (verify computes it again).
  table = {"noise_table": lattice.table_hash(ctx.sigma)} if noise.lattice else {}
  if grid is None:
    return Plan(fn, Certificate.columns, describe=what, details=table or None)
  # Budgeted inputs stop independently and share launches: certify 16 per call. The
  # rule and its schedule (the rule's defaults) are part of the run's record.
  kind = ""
  if isinstance(rule, Anytime):
    # The integer thresholds the engine will use, named by their digest (verify derives
    # them again and compares).
    s = ctx.settings
    dim = math.prod(ctx.dataset.input_shape)
    t = anytime_decisions(rule, n_max=s.n, alpha=s.alpha, noise=noise, scales=ctx.sigma, dim=dim)
    schedule = {**rule.record(), "thresholds": thresholds_digest(t.looks, t.c[0].T)}
    kind = " (anytime-valid)"
  else:
    b = Budget(grid=tuple(grid))
    schedule = {
      "first": b.first,
      "ratio": b.ratio,
      "final_share": b.final_share,
      "stop_alpha": b.stop_alpha,
    }
  return Plan(
    fn,
    BudgetedCertificate.columns,
    describe=f"{what}, budgeted{kind} on the radius grid {list(grid)}",
    inputs_per_call=16,
    details={"budget": schedule, **table},
  )
