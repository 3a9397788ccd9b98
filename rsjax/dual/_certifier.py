"""``--method dual`` (``rsjax.dual.METHOD``): :func:`rsjax.dual.certify` over a run's chunks,
the run's model the sigma estimator, the experts loaded from ``--dual-experts``."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

from rsjax.dual._certify import DualCertificate, certify, split_alpha
from rsjax.dual.method import parse_experts
from rsjax.runs.method import Context, MethodCertifier

__all__ = ["DualCertifier"]


def _load_expert(where: str, ctx: Context) -> tuple[tuple[Any, Any], dict]:
  """``((apply_fn, params), {fingerprint, config})`` of an expert's model directory."""
  from rsjax import models
  from rsjax.records.canonical import model_config_digest
  from rsjax.runs.runner import fingerprint

  try:
    model, config = models.load_model(where)
  except (FileNotFoundError, ValueError) as e:
    raise ValueError(f"--dual-experts: no usable model in {where!r}: {e}") from None
  ds = ctx.dataset
  if int(config["num_classes"]) != int(ds.num_classes):
    raise ValueError(
      f"--dual-experts: {where!r} has {config['num_classes']} classes, the data {ds.num_classes}"
    )
  apply_fn, params = models.to_apply_fn(model)
  return (apply_fn, params), {
    "fingerprint": fingerprint(params),
    "config": model_config_digest(config),
  }


@dataclasses.dataclass(frozen=True)
class DualCertifier(MethodCertifier):
  """Dual randomized smoothing of a run: the run's model is the estimator (its ``K`` logits
  the sigma indices of ``--dual-experts``), smoothed at the run's sigma."""

  ctx: Context
  experts: tuple[tuple[Any, Any], ...]
  sigmas: tuple[float, ...]
  options: dict
  columns: tuple[str, ...]
  describe: str
  details: dict | None = None

  @classmethod
  def from_options(
    cls,
    ctx: Context,
    *,
    dual_experts: str | None,
    dual_alpha_split: float,
    dual_estimator_n: int | None,
    dual_estimator_n0: int | None,
  ) -> DualCertifier:
    if dual_experts is None:
      raise ValueError("--method dual needs --dual-experts SIGMA:MODEL_DIR,SIGMA:MODEL_DIR,...")
    pairs = parse_experts(dual_experts)
    a1, a2 = split_alpha(ctx.settings.alpha, dual_alpha_split)
    for name, v in (("n", dual_estimator_n), ("n0", dual_estimator_n0)):
      if v is not None and v < 1:
        raise ValueError(f"--dual-estimator-{name} must be >= 1, got {v}")
    shape = tuple(ctx.dataset.input_shape)
    logits = ctx.apply_fn(ctx.params, jnp.zeros((1, *shape), jnp.float32))
    if logits.shape[-1] != len(pairs):
      raise ValueError(
        f"the estimator (the model) has {logits.shape[-1]} outputs, --dual-experts "
        f"{len(pairs)} sigmas"
      )
    loaded = [_load_expert(where, ctx) for _, where in pairs]
    sigmas = tuple(s for s, _ in pairs)
    details = {
      "sigmas": list(sigmas),
      "alphas": [a1, a2],
      "experts": [{"sigma": s, **facts} for s, (_, facts) in zip(sigmas, loaded, strict=True)],
    }
    options = {
      "alpha_split": dual_alpha_split,
      "estimator_n": dual_estimator_n,
      "estimator_n0": dual_estimator_n0,
    }
    describe = (
      f"dual randomized smoothing: estimator at sigma={ctx.sigma} (alpha {a1:g}), "
      f"experts at sigmas {list(sigmas)} (alpha {a2:g})"
    )
    experts = tuple(e for e, _ in loaded)
    return cls(ctx, experts, sigmas, options, DualCertificate.columns, describe, details)

  def certify(self, x: Any, ids: Any) -> DualCertificate:
    c = self.ctx
    return certify(
      c.key,
      c.apply_fn,
      c.params,
      self.experts,
      x,
      sigmas=self.sigmas,
      sigma_estimator=c.sigma,
      num_classes=c.dataset.num_classes,
      settings=c.settings,
      ids=ids,
      **self.options,
    )
