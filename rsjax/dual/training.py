"""``rsjax train --method dual``: the sigma estimator of dual randomized smoothing, trained
on targets the experts give (the routing form: experts trained at their sigmas elsewhere,
not retrained).

Each expert ``k`` is run on ``draws`` noisy copies ``x + N(0, sigmas[k]^2 I)`` of a training
input ``(x, y)``; ``p_k`` is the share it classifies as ``y``. The target is then, by
``rule``:

* ``"confident"`` (the default): the largest sigma whose expert is right on at least a share
  ``tau`` of its draws, where no expert is, the one with the largest ``p_k`` (the smaller
  sigma on ties). With ``n`` samples at certification a Cohen radius is at most
  ``sigmas[k] * Phi^-1(alpha^(1/n))``, so an expert that is right on (nearly) every draw
  certifies more than any smaller sigma can; this target sends each input to the
  largest sigma that still serves it, and its classes are ordered (robust inputs, large
  sigma), which a smoothed estimator can learn with confidence.
* ``"radius"``: the sigma maximizing the estimated radius ``sigmas[k] * Phi^-1(p_k)`` (``p_k``
  clipped to ``1 - 1 / (2 draws)``); where no expert has ``p_k > 1/2``, the smallest sigma.
  With few draws the clip makes it favour large sigmas whose experts are only moderately
  right (issue 57's first run: 84% sigma 0.5, and an estimator that chose it everywhere).

The estimator is then trained as any Gaussian-noise classifier over these ``K`` classes, at
the training ``--sigma`` (the noise it is certified with). ``rsjax.dual.calibrate`` then
chooses offsets of its logits on held-out data (not done here: it needs held-out digits).
This is the targets half of the paper's iterative training (the experts stay fixed: its
routing view); the joint iterations that retrain the experts are not implemented.
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

__all__ = [
  "RULES",
  "consistent_targets",
  "estimator_targets",
  "expert_hits",
  "init_from",
  "targets_from_hits",
  "train_job",
]

#: The target rules of :func:`targets_from_hits`.
RULES = ("confident", "radius")


def expert_hits(
  key: jax.Array,
  experts: Sequence[tuple[Callable, Any]],
  sigmas: Sequence[float],
  x: np.ndarray,
  y: np.ndarray,
  *,
  draws: int = 8,
  batch: int = 256,
) -> np.ndarray:
  """``[K, n]``: the share of ``draws`` noisy copies of each ``x`` (noise at ``sigmas[k]``)
  that expert ``k`` classifies as ``y``.

  Args:
    key: the noise key (expert ``k``, batch ``s`` use ``fold_in(key, k * n + s)``).
    experts: ``K`` pairs ``(apply_fn, params)``.
    sigmas: ``K`` noise levels.
    x: ``[n, *input_shape]`` inputs in [0, 1].
    y: ``[n]`` labels.
    draws: noisy copies per input and expert.
    batch: inputs per call.
  """
  n = len(x)
  p = np.zeros((len(sigmas), n))
  for k, ((apply_fn, params), sigma) in enumerate(zip(experts, sigmas, strict=True)):

    @jax.jit
    def hits(
      key: jax.Array,
      xb: jax.Array,
      yb: jax.Array,
      apply_fn: Callable = apply_fn,
      params: Any = params,
      sigma: float = sigma,
    ) -> jax.Array:
      noise = sigma * jax.random.normal(key, (draws, *xb.shape), xb.dtype)
      noisy = (xb[None] + noise).reshape(-1, *xb.shape[1:])
      pred = jnp.argmax(apply_fn(params, noisy), axis=-1).reshape(draws, -1)
      return jnp.mean(pred == yb[None], axis=0)

    for s in range(0, n, batch):
      xb = jnp.asarray(x[s : s + batch], jnp.float32)
      yb = jnp.asarray(y[s : s + batch])
      p[k, s : s + batch] = np.asarray(hits(jax.random.fold_in(key, k * n + s), xb, yb))
  return p


def targets_from_hits(
  p: np.ndarray, sigmas: Sequence[float], *, draws: int, rule: str = "confident", tau: float = 1.0
) -> np.ndarray:
  """``[n]`` int targets from the hit shares ``p`` (``[K, n]``, :func:`expert_hits`) by
  ``rule`` (module docstring); ``tau`` is the ``"confident"`` rule's share."""
  sig = np.asarray(sigmas, np.float64)
  if rule == "confident":
    order = np.argsort(sig, kind="stable")  # ascending sigma
    ok = p[order] >= tau - 1e-12
    largest = len(sig) - 1 - np.argmax(ok[::-1], axis=0)  # last True in ascending order
    best = order[np.argmax(p[order], axis=0)]  # first max: the smaller sigma on ties
    return np.where(ok.any(axis=0), order[largest], best).astype(np.int64)
  if rule != "radius":
    raise ValueError(f"unknown target rule {rule!r}; expected one of {RULES}")
  q = np.minimum(p, 1.0 - 0.5 / draws)
  radius = np.where(q > 0.5, sig[:, None] * special.ndtri(q), -np.inf)
  none = ~np.isfinite(radius).any(axis=0)
  return np.where(none, int(np.argmin(sig)), np.argmax(radius, axis=0)).astype(np.int64)


def estimator_targets(
  key: jax.Array,
  experts: Sequence[tuple[Callable, Any]],
  sigmas: Sequence[float],
  x: np.ndarray,
  y: np.ndarray,
  *,
  draws: int = 8,
  batch: int = 256,
  rule: str = "confident",
  tau: float = 1.0,
) -> np.ndarray:
  """``[n]`` int: the sigma index of each ``(x, y)`` by ``rule`` (module docstring)."""
  p = expert_hits(key, experts, sigmas, x, y, draws=draws, batch=batch)
  return targets_from_hits(p, sigmas, draws=draws, rule=rule, tau=tau)


def consistent_targets(
  share: np.ndarray, hits: np.ndarray, targets: np.ndarray, *, keep: float = 0.5
) -> np.ndarray:
  """The next round's targets (the estimator half of an iterative training): each input's
  majority vote of the current estimator under its noise where the expert it picks is right
  on at least ``keep`` of its draws, else the input's target of this round.

  The smoothed estimator's radius grows with the share of its vote, so training on its own
  majority makes its choices more unanimous; the experts' hits keep it from routing an
  input to an expert that gets it wrong.

  Args:
    share: ``[n, K]`` the estimator's vote shares (``rsjax.dual.estimator_logits``, argmax).
    hits: ``[K, n]`` the experts' hit shares (:func:`expert_hits`).
    targets: ``[n]`` this round's targets.
    keep: the least hit share of the expert a majority picks.
  """
  majority = np.argmax(share, axis=1)
  ok = hits[majority, np.arange(len(majority))] >= keep
  return np.where(ok, majority, targets).astype(np.int64)


def init_from(estimator: Any, expert: Any) -> int:
  """Copies into ``estimator`` every parameter of ``expert`` at the same path and of the same
  shape (all but the output layer, for the same architecture), in place; returns how many.

  An estimator smoothed at an expert's sigma then starts from features trained on inputs
  under that very noise (the experts' noise is its own), rather than from scratch."""
  from flax import nnx

  src = {p: v for p, v in nnx.iter_graph(expert) if isinstance(v, nnx.Param)}
  copied = 0
  for path, v in nnx.iter_graph(estimator):
    if isinstance(v, nnx.Param) and path in src and src[path][...].shape == v[...].shape:
      v[...] = src[path][...]
      copied += 1
  return copied


def _experts(text: str | None) -> tuple[list[tuple[Callable, Any]], list[float]]:
  if text is None:
    raise ValueError("--method dual trains the estimator: give --dual-experts SIGMA:DIR,...")
  loaded: list[tuple[Callable, Any]] = []
  sigmas: list[float] = []
  for sigma, where in parse_experts(text):
    model, _ = models.load_model(where)
    loaded.append(models.to_apply_fn(model))
    sigmas.append(sigma)
  return loaded, sigmas


def train_job(
  job: TrainJob,
  *,
  dual_experts: str | None,
  dual_draws: int,
  dual_target: str = "confident",
  dual_tau: float = 1.0,
  dual_init: str = "none",
) -> str:
  """The estimator of ``--dual-experts`` trained on their targets at the job's sigma (from
  the expert at that sigma with ``dual_init="expert"``); the closing line (with the share of
  each target)."""
  if not 0.0 < dual_tau <= 1.0:
    raise ValueError(f"--dual-tau must be in (0, 1], got {dual_tau}")
  experts, sigmas = _experts(dual_experts)

  def targets_of(i: int, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    key = jax.random.fold_in(job.key, i)
    return estimator_targets(
      key, experts, sigmas, x, y, draws=dual_draws, rule=dual_target, tau=dual_tau
    )

  x, y = job.train_data
  targets = targets_of(1, x, y)
  eval_data = None
  if job.eval_data is not None:
    xe, ye = job.eval_data
    eval_data = (xe, targets_of(2, xe, ye))
  cfg = job.model_config
  seed = int(jax.random.randint(jax.random.fold_in(job.key, 3), (), 0, 2**31 - 1))
  model = models.create_model(
    cfg["model"], num_classes=len(sigmas), input_shape=tuple(cfg["input_shape"]), rngs=seed
  )
  if dual_init == "expert":
    at = [k for k, s in enumerate(sigmas) if s == job.config.sigma]
    if not at:
      raise ValueError(f"--dual-init expert: no expert at --sigma {job.config.sigma}")
    where = parse_experts(dual_experts or "")[at[0]][1]
    if init_from(model, models.load_model(where)[0]) == 0:
      raise ValueError(f"--dual-init expert: {where!r} shares no parameter with the estimator")
  config = {**cfg, "num_classes": len(sigmas), "dual_sigmas": sigmas, "dual_target": dual_target}
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
