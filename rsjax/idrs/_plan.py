"""The plan of ``--method idrs``: input-dependent sigma(x) with the sound IDRS certificate."""

from __future__ import annotations

from rsjax.cohen._certify import certify
from rsjax.idrs import _radius
from rsjax.idrs._certify import IDRS, IDRSCertificate
from rsjax.idrs._design import KnnSigma, make_design
from rsjax.method import Context, Plan


def build(ctx: Context, *, idrs_rate: float, idrs_k: int, idrs_m: float | None) -> Plan:
  """Refuses what IDRS cannot certify, else the plan (``rsjax.method.Method.build``)."""
  xtr = ctx.load_split("train").arrays()[0] if idrs_rate > 0 else None
  try:
    design = make_design(
      xtr, sigma=ctx.sigma, rate=idrs_rate, k=idrs_k, m=idrs_m, dataset=ctx.dataset.name
    )
  except ValueError as e:
    raise ValueError(f"{e} (set --idrs-m)") from None

  def fn(x, ids):
    return certify(
      ctx.key,
      ctx.apply_fn,
      ctx.params,
      x,
      sigma=None,
      certifier=IDRS(design),
      ids=ids,
      num_classes=ctx.dataset.num_classes,
      settings=ctx.settings,
    )

  return Plan(
    fn, IDRSCertificate.columns, describe=f"IDRS, design {design!r}", details=details(design)
  )


def details(design: object) -> dict:
  """What ``rsjax verify`` needs of an IDRS design: sigma(x)'s formula and the radius search."""
  # The radius search of certify at its defaults (rtol 1e-4, certified_radius's atol).
  out = {
    "design": repr(design),
    "radius_rtol": 1e-4,
    "radius_atol": 1e-7,
    "xi_margin": _radius.XI_MARGIN,
    "max_noncentrality": _radius.SEARCH_MAX_NONCENTRALITY,
  }
  if isinstance(design, KnnSigma):
    out.update(
      kind="knn",
      sigma_b=design.sigma_b,
      rate=design.rate,
      k=design.k,
      m=design.m,
      eps=design.eps,
      sigma_min=design.sigma_min,
      sigma_max=design.sigma_max,
    )
  else:
    out.update(kind="constant", sigma_b=float(design.sigma), rate=0.0)
  return out
