"""Offsets of the sigma estimator's logits, chosen on held-out data.

A trained estimator ``g`` (``K`` logits) becomes ``g_b(x) = argmax_k (logits_k(x) + b_k)``:
still a fixed classifier, certified by the engine as any other, so the certificate is
unchanged (``rsjax.dual._certify``); ``b`` moves its choice between sigmas, as a prior
shift. It is chosen on inputs that neither the experts nor the estimator were trained on
(never on the test inputs), to maximize the smallest gap between the predicted certified
accuracy of dual randomized smoothing and the single-sigma envelope over ``radii`` (ties:
the larger mean), where each held-out input's certificate is predicted from ``draws``
noisy passes:

* the estimator's vote shares ``v`` (of ``argmax(logits + b)``) give its choice ``k*`` and
  the radius ``sigma_g * Phi^-1(CP lower of v_k* n at alpha_1)``;
* expert ``k``'s hit share ``p_k`` gives its radius ``sigmas[k] * Phi^-1(CP lower of p_k n at
  alpha_2)`` (0 unless ``p_k > 1/2``: the expert's top class is then the label);

so the prediction is what ``n`` estimation samples would give had the shares been exact.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from scipy import special, stats

__all__ = ["certified", "choose_offsets", "estimator_logits", "predicted_radii", "shift_logits"]


def estimator_logits(
  key: jax.Array,
  apply_fn: Callable,
  params: Any,
  x: np.ndarray,
  *,
  sigma: float,
  draws: int,
  batch: int = 64,
) -> np.ndarray:
  """``[n, draws, K]``: the estimator's logits on ``draws`` copies ``x + N(0, sigma^2 I)``."""

  @jax.jit
  def run(key: jax.Array, xb: jax.Array) -> jax.Array:
    noise = sigma * jax.random.normal(key, (draws, *xb.shape), xb.dtype)
    out = apply_fn(params, (xb[None] + noise).reshape(-1, *xb.shape[1:]))
    return jnp.swapaxes(out.reshape(draws, xb.shape[0], -1), 0, 1)

  parts = [
    np.asarray(run(jax.random.fold_in(key, s), jnp.asarray(x[s : s + batch], jnp.float32)))
    for s in range(0, len(x), batch)
  ]
  return np.concatenate(parts).astype(np.float64)


def predicted_radius(
  share: np.ndarray, sigma: np.ndarray | float, n: int, alpha: float
) -> np.ndarray:
  """Cohen's radius had ``share * n`` of ``n`` samples hit (0 unless the bound is > 1/2)."""
  k = np.round(np.clip(share, 0.0, 1.0) * n)
  lower = np.where(k > 0, stats.beta.ppf(alpha, np.maximum(k, 1), n - k + 1), 0.0)
  return np.where(lower > 0.5, sigma * special.ndtri(np.clip(lower, 0.5, 1.0)), 0.0)


def predicted_radii(
  logits: np.ndarray,
  offsets: np.ndarray,
  hits: np.ndarray,
  sigmas: Sequence[float],
  *,
  sigma_estimator: float,
  n: int,
  alphas: tuple[float, float],
) -> np.ndarray:
  """``[n_inputs]``: each held-out input's predicted dual radius (0: abstain or wrong).

  Args:
    logits: ``[n_inputs, draws, K]`` (:func:`estimator_logits`).
    offsets: ``[K]`` added to the logits.
    hits: ``[K, n_inputs]`` hit shares of the experts (``rsjax.dual.training.expert_hits``).
    sigmas: the experts' ``K`` sigmas.
    sigma_estimator: the estimator's noise.
    n: estimation samples of each half at certification.
    alphas: ``(alpha_1, alpha_2)``, the estimator's and the classifier's levels.
  """
  k = logits.shape[-1]
  votes = np.argmax(logits + np.asarray(offsets)[None, None], axis=-1)  # [n_in, draws]
  share = (votes[..., None] == np.arange(k)).mean(axis=1)  # [n_in, K]
  chosen = np.argmax(share, axis=1)
  r_g = predicted_radius(share[np.arange(len(chosen)), chosen], sigma_estimator, n, alphas[0])
  p = hits[chosen, np.arange(len(chosen))]
  r_f = predicted_radius(p, np.asarray(sigmas, np.float64)[chosen], n, alphas[1])
  return np.minimum(r_g, r_f)


def certified(radius: np.ndarray, radii: np.ndarray) -> np.ndarray:
  """``[len(radii)]``: the share of ``radius`` (``[n]``, 0: abstain or wrong) that is positive
  and at least each of ``radii``."""
  return ((radius[None] > 0) & (radius[None] >= radii[:, None])).mean(axis=1)


def choose_offsets(
  logits: np.ndarray,
  hits: np.ndarray,
  sigmas: Sequence[float],
  *,
  sigma_estimator: float,
  n: int,
  alpha: float,
  alphas: tuple[float, float],
  radii: Sequence[float],
  grid: Sequence[float] = (-4.0, -2.0, -1.0, 0.0, 1.0, 2.0, 4.0),
  objective: str = "worst",
  envelope: Sequence[float] | None = None,
) -> tuple[np.ndarray, dict]:
  """The offsets (first fixed at 0, the others over ``grid``) that maximize the smallest gap
  to the predicted single-sigma envelope over ``radii`` (``objective="worst"``, module
  docstring), or minimize the sum of the shortfalls below it (``"total"``; ties: the larger
  mean). ``envelope`` (over ``radii``): the curve to compare with, by default the predicted
  envelope of the ``K`` experts (give that of more experts where the estimator routes to a
  subset of them). An input counts at radius ``r`` where its radius is positive and >= ``r``.

  Returns:
    ``(offsets [K], facts)``: ``facts`` has the predicted ``dual`` and ``envelope`` curves
    and the smallest ``gap``, with and without the offsets.
  """
  r = np.asarray(radii, np.float64)
  if envelope is None:
    single = [predicted_radius(hits[k], s, n, alpha) for k, s in enumerate(sigmas)]
    env = np.max([certified(x, r) for x in single], axis=0)
  else:
    env = np.asarray(envelope, np.float64)

  def score(b: Sequence[float] | np.ndarray) -> tuple[tuple[float, float], np.ndarray]:
    radius = predicted_radii(
      logits, np.asarray(b), hits, sigmas, sigma_estimator=sigma_estimator, n=n, alphas=alphas
    )
    c = certified(radius, r)
    gap = c - env
    first = np.min(gap) if objective == "worst" else -np.sum(np.maximum(-gap, 0.0))
    return (float(first), float(np.mean(c))), c

  if objective not in ("worst", "total"):
    raise ValueError(f"objective must be 'worst' or 'total', got {objective!r}")

  k = logits.shape[-1]
  best, best_s, best_c = None, None, None
  for rest in itertools.product(grid, repeat=k - 1):
    s, c = score((0.0, *rest))
    if best_s is None or s > best_s:
      best, best_s, best_c = np.asarray((0.0, *rest)), s, c
  assert best is not None and best_s is not None and best_c is not None
  (_, _), c0 = score(np.zeros(k))
  facts = {
    "objective": objective,
    "radii": r.tolist(),
    "envelope": env.tolist(),
    "dual": best_c.tolist(),
    "gap": float(np.min(best_c - env)),
    "shortfall": float(np.sum(np.maximum(env - best_c, 0.0))),
    "dual_no_offsets": c0.tolist(),
    "gap_no_offsets": float(np.min(c0 - env)),
  }
  return best, facts


def shift_logits(model: Any, offsets: Sequence[float]) -> Any:
  """Adds ``offsets`` to the bias of ``model``'s one output layer (the ``nnx.Linear`` with
  ``len(offsets)`` outputs), in place; returns the model."""
  from flax import nnx

  k = len(offsets)
  heads = [m for _, m in nnx.iter_graph(model) if isinstance(m, nnx.Linear) and m.out_features == k]
  bias = heads[0].bias if len(heads) == 1 else None
  if bias is None:
    raise ValueError(f"expected one nnx.Linear with {k} outputs and a bias, got {len(heads)}")
  bias[...] = bias[...] + jnp.asarray(offsets, bias[...].dtype)
  return model
