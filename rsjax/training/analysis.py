"""Per-sample gradient norms for the ACR study (Sun et al. 2025, Table 1).

Sun et al. measure how much each training method weighs easy (``p_A > 0.5``)
against hard (``p_A < 0.5``) inputs by the average L2 norm of per-sample
gradients. Their analysis script is not public; here the gradient is that of
the per-input Gaussian training loss ``(1/m) sum_j CE(f(x + delta_j), y)``
with respect to *all model parameters*, with the model in eval mode (BatchNorm
running statistics: a per-sample batch statistic is undefined), ``m`` noise
draws per input. The same loss for every method makes the norms comparable
across methods: they say how strongly Gaussian training would pull on each
input under that model.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt

from rsjax.training.attacks import cross_entropy
from rsjax.training.objectives import replicate

if TYPE_CHECKING:
  from rsjax.engine.step import ApplyFn

__all__ = ["per_sample_gradient_norms", "gradient_norm_table"]


@functools.partial(jax.jit, static_argnames=("apply_fn", "m"))
def _norms(key, params, x, y, sigma, *, apply_fn, m):
  def one(xi, yi, ki):
    def loss(p):
      xr, yr, delta = replicate(ki, xi[None], yi[None], sigma, m)
      return cross_entropy(apply_fn(p, xr + delta), yr).mean()

    g = jax.grad(loss)(params)
    return jnp.sqrt(
      sum(jnp.sum(jnp.square(leaf.astype(jnp.float32))) for leaf in jax.tree.leaves(g))
    )

  keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(x.shape[0]))
  return jax.vmap(one)(x, y, keys)


def per_sample_gradient_norms(
  key: jax.Array,
  apply_fn: ApplyFn,
  params: Any,
  x: npt.ArrayLike,
  y: npt.ArrayLike,
  *,
  sigma: float,
  num_noise: int = 4,
  batch_size: int = 64,
) -> np.ndarray:
  """L2 norm of each input's Gaussian-loss gradient with respect to the parameters.

  Args:
    key: a ``jax.random.key``; input ``i`` of a call uses noise from
      ``fold_in(fold_in(key, start), i)`` for its chunk starting at ``start``.
    apply_fn: eval-mode ``apply_fn(params, x) -> logits`` (hashable, e.g.
      ``rsjax.models.to_apply_fn``).
    params: its parameters (every floating leaf is differentiated).
    x: ``[N, ...]`` inputs in [0, 1]; ``y``: ``[N]`` labels.
    sigma: noise level.
    num_noise: m, noise draws per input (4, the study's m).
    batch_size: inputs per vmapped chunk.

  Returns:
    ``[N]`` float64 gradient norms.
  """
  x = np.asarray(x, np.float32)
  y = np.asarray(y, np.int32)
  out = []
  for start in range(0, x.shape[0], batch_size):
    chunk, chunk_key = slice(start, start + batch_size), jax.random.fold_in(key, start)
    norms = _norms(
      chunk_key, params, x[chunk], y[chunk], jnp.float32(sigma), apply_fn=apply_fn, m=num_noise
    )
    out.append(np.asarray(norms))
  return np.concatenate(out).astype(np.float64)


def gradient_norm_table(norms: npt.ArrayLike, pa: npt.ArrayLike, *, threshold: float = 0.5) -> dict:
  """Average gradient norm of easy (``p_A >= threshold``) and hard inputs, and their ratio.

  Args:
    norms: ``[N]`` per-sample gradient norms.
    pa: ``[N]`` p_A of the same inputs (e.g. under a reference model).
    threshold: the easy/hard split.

  Returns:
    ``{"easy": float, "hard": float, "easy_over_hard": float}`` (NaN for an empty side).
  """
  norms, pa = np.asarray(norms, np.float64), np.asarray(pa, np.float64)
  if norms.shape != pa.shape:
    raise ValueError(f"norms {norms.shape} and pa {pa.shape} differ in shape")
  easy = pa >= threshold
  e = float(norms[easy].mean()) if easy.any() else float("nan")
  h = float(norms[~easy].mean()) if (~easy).any() else float("nan")
  return {"easy": e, "hard": h, "easy_over_hard": e / h if h > 0 else float("nan")}
