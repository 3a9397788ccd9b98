"""Attacks of certified training: what perturbs the inputs or the noise draws.

* :class:`SphereAttack`: the adaptive attack on the noise sphere of Sun et al.
  (2025), used by :class:`rsjax.training.objectives.Gaussian`.
* :func:`smoothed_pgd` and :func:`warmup_epsilon`: SmoothAdv's L2 PGD attack on
  the soft smoothed classifier and its linear radius warm-up (Salman et al.
  2019), used by :class:`rsjax.training.objectives.SmoothAdv`.
* :func:`cross_entropy`, :func:`row_norm`, :func:`per_row`: the row-wise
  helpers the attacks and the objectives share.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import optax

from rsjax.stats import check_integral

if TYPE_CHECKING:
  from jax.typing import ArrayLike

  from rsjax.engine.step import ApplyFn

__all__ = [
  "SphereAttack",
  "cross_entropy",
  "per_row",
  "row_norm",
  "smoothed_pgd",
  "warmup_epsilon",
]


def cross_entropy(logits: jax.Array, y: jax.Array) -> jax.Array:
  """Per-row float32 cross-entropy of ``logits [n, C]`` against integer labels ``y [n]``."""
  return optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), y)


def row_norm(v: jax.Array) -> jax.Array:
  """L2 norm of each row of ``v [n, ...]``."""
  return jnp.sqrt(jnp.sum(jnp.square(v.reshape(v.shape[0], -1)), axis=1))


def per_row(s: jax.Array, like: jax.Array) -> jax.Array:
  """``s [n]`` reshaped to broadcast over the rows of ``like [n, ...]``."""
  return s.reshape((-1,) + (1,) * (like.ndim - 1))


@dataclasses.dataclass(frozen=True)
class SphereAttack:
  """Adaptive attack on the noise sphere (Sun et al. 2025, Algorithm 1; ``radius_PGD``).

  Starting from a Gaussian draw ``delta0``, up to ``steps`` PGD steps ascend the
  cross-entropy of the base classifier at ``x + delta`` and project back onto
  the sphere ``||delta||_2 = ||delta0||_2`` (a Gaussian has equal density
  there, Theorem 2). A copy is frozen at the first iterate the classifier gets
  wrong (checked before each step), so copies that are misclassified from the
  start are unchanged; without a misclassification the last iterate is kept.

  * L2 step: ``delta += step_size * g / (||g||_2 + 1e-8)``.
  * Linf step: ``delta += (step_size / sqrt(d)) * sign(g)``: ``step_size`` is
    the paper's ``sqrt(d) * eps`` (0.25 in its App. C.2), the per-coordinate
    step then shrinks with the input dimension ``d``.

  Defaults: CIFAR-10 at sigma = 0.5 (Table 4: T = 6, eps = 0.25, L2), active
  from ``start_epoch`` = E_t. For MNIST the L2 step is kept (it is a distance on
  the same sphere of radius ~ sigma * sqrt(d), relative moves only get smaller
  as d grows); scale ``start_epoch`` with the number of epochs (70 of 150).

  Attributes:
    steps: T, the maximum number of PGD steps.
    step_size: eps (L2) or sqrt(d) * eps (Linf).
    norm: ``"l2"`` or ``"linf"``.
    start_epoch: first (0-based) epoch in which the attack runs; before it the
      noise is plain Gaussian.
  """

  steps: int = 6
  step_size: float = 0.25
  norm: str = "l2"
  start_epoch: int = 0

  def __post_init__(self):
    check_integral("steps", self.steps)
    if not (math.isfinite(self.step_size) and self.step_size > 0):
      raise ValueError(f"step_size must be > 0, got {self.step_size!r}")
    if self.norm not in ("l2", "linf"):
      raise ValueError(f"norm must be 'l2' or 'linf', got {self.norm!r}")
    check_integral("start_epoch", self.start_epoch, 0)

  def __call__(self, apply_fn, params, x, y, delta0):
    """Runs Algorithm 1 on every row.

    Args:
      apply_fn: ``apply_fn(params, x) -> logits`` (eval mode in training).
      params: the classifier's parameters (not differentiated).
      x: ``[n, *input_shape]`` clean inputs; ``y``: ``[n]`` labels.
      delta0: ``[n, *input_shape]`` initial Gaussian noise.

    Returns:
      ``delta [n, *input_shape]`` with ``||delta_i||_2 = ||delta0_i||_2``.
    """
    params = jax.lax.stop_gradient(params)
    radius = row_norm(delta0)
    dim = math.prod(x.shape[1:])

    def loss(d):
      logits = apply_fn(params, x + d)
      return jnp.sum(cross_entropy(logits, y)), logits

    def body(_, carry):
      delta, active = carry
      (_, logits), g = jax.value_and_grad(loss, has_aux=True)(delta)
      active = active & (jnp.argmax(logits, axis=-1) == y)
      if self.norm == "l2":
        step = self.step_size * g / per_row(row_norm(g) + 1e-8, g)
      else:
        step = (self.step_size / math.sqrt(dim)) * jnp.sign(g)
      new = delta + step
      norm = row_norm(new)
      new = new * per_row(jnp.where(norm > 0, radius / jnp.where(norm > 0, norm, 1.0), 1.0), new)
      return jnp.where(per_row(active, delta), new, delta), active

    active = jnp.ones(y.shape, bool)
    delta, _ = jax.lax.fori_loop(0, self.steps, body, (delta0, active))
    return jax.lax.stop_gradient(delta)


def warmup_epsilon(epsilon: float, warmup: int, epoch: ArrayLike) -> jax.Array:
  """SmoothAdv's warmed-up radius of a (0-based) epoch: ``min(eps, (epoch + 1) * eps / warmup)``."""
  return jnp.minimum(epsilon, (jnp.asarray(epoch, jnp.float32) + 1) * epsilon / warmup)


def smoothed_pgd(
  apply_fn: ApplyFn,
  params: Any,
  x: jax.Array,
  y: jax.Array,
  noise: jax.Array,
  eps: ArrayLike,
  *,
  steps: int,
  num_noise: int,
) -> jax.Array:
  """SmoothAdv's PGD on the soft smoothed classifier (Salman et al. 2019, ``train_pgd.py``).

  Starts at ``x' = x`` and takes ``steps`` steps of size ``2 eps / steps``
  along the normalized gradient of ``-log(mean_i softmax(f(x' + noise_i))_y)``,
  clipping ``x'`` to [0, 1] and projecting onto the eps-ball after each.

  Args:
    apply_fn: ``apply_fn(params, x) -> logits``.
    params: the classifier's parameters (not differentiated).
    x: ``[B, *input_shape]`` clean inputs; ``y``: ``[B]`` labels.
    noise: ``[B*m, ...]`` noise (input-major copies of each input).
    eps: the attack radius (L2).
    steps: PGD steps.
    num_noise: m, the noise draws per input.

  Returns:
    ``x' [B, ...]`` with ``||x' - x|| <= eps``.
  """
  m = num_noise
  params = jax.lax.stop_gradient(params)
  step = 2.0 * eps / steps

  def neg_log_smoothed(adv):
    logits = apply_fn(params, jnp.repeat(adv, m, axis=0) + noise).astype(jnp.float32)
    p = jax.nn.softmax(logits).reshape(x.shape[0], m, -1).mean(1)
    p_y = jnp.take_along_axis(p, y[:, None], axis=1)[:, 0]
    return -jnp.sum(jnp.log(jnp.maximum(p_y, 1e-20)))

  def body(_, delta):
    g = jax.grad(neg_log_smoothed)(x + delta)
    delta = delta + step * g / per_row(row_norm(g) + 1e-12, g)
    delta = jnp.clip(x + delta, 0.0, 1.0) - x
    norm = row_norm(delta)
    scale = jnp.where(norm > eps, eps / jnp.where(norm > 0, norm, 1.0), 1.0)
    return delta * per_row(scale, delta)

  delta = jax.lax.fori_loop(0, steps, body, jnp.zeros_like(x))
  return jax.lax.stop_gradient(x + delta)
