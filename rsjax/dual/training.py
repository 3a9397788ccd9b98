"""``rsjax train --method dual``: the sigma estimator of dual randomized smoothing, trained
on targets the experts give (the routing form: experts trained at their sigmas elsewhere,
not retrained).

The target of a training input ``(x, y)`` is the sigma index whose expert would certify
the largest radius there, estimated from a few noisy samples: with ``p_k`` the share of
``draws`` samples ``x + N(0, sigmas[k]^2 I)`` that expert ``k`` classifies as ``y`` (clipped
to ``1 - 1 / (2 draws)``), the index maximizing ``sigmas[k] * Phi^-1(p_k)``; where no expert
has ``p_k > 1/2``, the smallest sigma (the most accurate expert). The estimator is then
trained as any Gaussian-noise classifier over these ``K`` classes, at the training
``--sigma`` (the noise it is certified with). This is the targets half of the paper's
iterative training (the experts stay fixed: its routing view); the joint iterations are not
implemented.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from scipy import special

from rsjax import models
from rsjax.dual._check import parse_experts
from rsjax.training.job import TrainJob
from rsjax.training.trainer import train

__all__ = ["estimator_targets", "train_job"]


def estimator_targets(
  key: jax.Array,
  experts: Sequence[tuple[Callable, Any]],
  sigmas: Sequence[float],
  x: np.ndarray,
  y: np.ndarray,
  *,
  draws: int = 8,
  batch: int = 256,
) -> np.ndarray:
  """``[n]`` int: for each ``(x, y)`` the sigma index with the largest estimated radius
  (module docstring)."""
  n = len(x)
  p = np.zeros((len(sigmas), n))
  for k, ((apply_fn, params), sigma) in enumerate(zip(experts, sigmas, strict=True)):

    @jax.jit
    def hits(key, xb, yb, apply_fn=apply_fn, params=params, sigma=sigma):
      noise = sigma * jax.random.normal(key, (draws, *xb.shape), xb.dtype)
      noisy = (xb[None] + noise).reshape(-1, *xb.shape[1:])
      pred = jnp.argmax(apply_fn(params, noisy), axis=-1).reshape(draws, -1)
      return jnp.mean(pred == yb[None], axis=0)

    for s in range(0, n, batch):
      xb = jnp.asarray(x[s : s + batch], jnp.float32)
      yb = jnp.asarray(y[s : s + batch])
      p[k, s : s + batch] = np.asarray(hits(jax.random.fold_in(key, k * n + s), xb, yb))
  p = np.minimum(p, 1.0 - 0.5 / draws)
  radius = np.asarray(sigmas, np.float64)[:, None] * special.ndtri(p)
  radius = np.where(p > 0.5, radius, -np.inf)
  best = np.argmax(radius, axis=0)
  none = ~np.isfinite(radius).any(axis=0)
  return np.where(none, int(np.argmin(sigmas)), best).astype(np.int64)


def _experts(text: str | None) -> tuple[list[tuple[Callable, Any]], list[float]]:
  if text is None:
    raise ValueError("--method dual trains the estimator: give --dual-experts SIGMA:DIR,...")
  loaded, sigmas = [], []
  for sigma, where in parse_experts(text):
    model, _ = models.load_model(where)
    loaded.append(models.to_apply_fn(model))
    sigmas.append(sigma)
  return loaded, sigmas


def train_job(job: TrainJob, *, dual_experts: str | None, dual_draws: int) -> str:
  """The estimator of ``--dual-experts`` trained on their targets at the job's sigma; the
  closing line (with the share of each target)."""
  experts, sigmas = _experts(dual_experts)
  x, y = job.train_data
  key = jax.random.fold_in(job.key, 1)
  targets = estimator_targets(key, experts, sigmas, x, y, draws=dual_draws)
  eval_data = None
  if job.eval_data is not None:
    xe, ye = job.eval_data
    te = estimator_targets(
      jax.random.fold_in(job.key, 2), experts, sigmas, xe, ye, draws=dual_draws
    )
    eval_data = (xe, te)
  cfg = job.model_config
  seed = int(jax.random.randint(jax.random.fold_in(job.key, 3), (), 0, 2**31 - 1))
  model = models.create_model(
    cfg["model"], num_classes=len(sigmas), input_shape=tuple(cfg["input_shape"]), rngs=seed
  )
  config = {**cfg, "num_classes": len(sigmas), "dual_sigmas": sigmas}
  _, history = train(
    job.key,
    model,
    (x, targets),
    job.config,
    eval_data=eval_data,
    workdir=job.workdir,
    resume=True,
    model_config=config,
    progress=job.progress,
  )
  share = ", ".join(f"sigma {s}: {np.mean(targets == k):.2f}" for k, s in enumerate(sigmas))
  what = f"as the dual sigma estimator at sigma={job.config.sigma} (targets {share})"
  return job.closing(history, what, "noisy accuracy {noisy_acc:.4f}")
