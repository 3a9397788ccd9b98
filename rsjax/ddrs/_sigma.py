"""DDRS's sigma optimization (Algorithm 1): per-input sigma by ascent on the soft smoothed margin.

The objective, its noise and the ``SigmaAscent`` settings are in
``rsjax.ddrs._objective``; this module runs the ascent (``sigma_ascent`` inside
``jax.jit``, ``optimize_sigma`` compiled) and wraps it as a sigma source
(``OptimizedSigma``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from rsjax.ddrs._objective import SigmaAscent, check_inputs, noise, objective
from rsjax.engine import precision as precision_lib
from rsjax.engine.step import cast_floating
from rsjax.noise.sigma import SigmaValues
from rsjax.util import as_key

__all__ = ["OptimizedSigma", "optimize_sigma", "sigma_ascent"]


def _ascent(
  key,
  apply_fn,
  params,
  x,
  sigma0,
  ids,
  lr,
  lo,
  hi,
  sigma_min,
  *,
  steps,
  num_samples,
  family,
  parametrization,
  return_path,
  compute_dtype,
):
  """The ascent loop with traced ``lr, lo, hi, sigma_min`` (static: the rest)."""
  # The classifier is frozen, and computed as the engine computes it (cast to compute_dtype).
  params = cast_floating(jax.lax.stop_gradient(params), compute_dtype)
  obj = functools.partial(objective, apply_fn, params, family=family, compute_dtype=compute_dtype)
  grad_fn = jax.vmap(jax.grad(obj, argnums=1), in_axes=(0, 0, 0, None, None))

  def body(sigma, t):
    z = noise(key, t, ids, x.shape[1:], num_samples, family)
    g = grad_fn(x, sigma, z, lo, hi)
    if parametrization == "log":  # d R / d log sigma = sigma * dR/dsigma
      # at most a factor e^(+-1/2) per step: the gradient is heavy-tailed near the boundary
      new = sigma * jnp.exp(jnp.clip(lr * sigma * g, -0.5, 0.5))
    else:
      new = sigma + lr * g  # plain ascent (the paper)
    new = jnp.where(jnp.isfinite(new), new, sigma)  # a non-finite gradient skips the step
    new = jnp.maximum(new, sigma_min)  # projection (see optimize_sigma)
    return new, new

  sigma, path = jax.lax.scan(body, sigma0, jnp.arange(steps))
  if return_path:
    return sigma, jnp.concatenate([sigma0[None], path], axis=0)
  return sigma


def sigma_ascent(
  key: jax.Array,
  apply_fn: Callable,
  params: Any,
  x: ArrayLike,
  sigma0: ArrayLike,
  ids: ArrayLike,
  *,
  config: SigmaAscent,
  return_path: bool = False,
  precision: str | None = None,
) -> jax.Array | tuple[jax.Array, jax.Array]:
  """The traceable ascent loop of :func:`optimize_sigma` (use inside ``jax.jit``).

  The classifier runs in ``precision``'s compute dtype; its matmul precision is
  the one in force while tracing: trace inside ``rsjax.engine.precision.context(precision)``
  (as :func:`optimize_sigma` does).

  Args:
    key: a ``jax.random.key``; noise of input ``ids[i]`` at step t from
      ``fold_in(fold_in(key, t), ids[i])``.
    apply_fn: ``apply_fn(params, x) -> logits``.
    params: the classifier's pytree (not differentiated: wrapped in stop_gradient).
    x: ``[B, *input_shape]``.
    sigma0: ``[B]`` starting sigma.
    ids: ``[B]`` integer ids.
    config: a :class:`SigmaAscent` (its values enter the program as constants).
    return_path: also return the ``[steps + 1, B]`` sigmas along the path.
    precision: the declared precision (``rsjax.engine.precision``; default ``"float32"``).

  Returns:
    ``[B]`` optimized sigma (and the path when ``return_path``).
  """
  return _ascent(
    key,
    apply_fn,
    params,
    x,
    sigma0,
    ids,
    config.lr,
    *config.clip,
    config.sigma_min,
    steps=config.steps,
    num_samples=config.num_samples,
    family=config.family,
    parametrization=config.parametrization,
    return_path=return_path,
    compute_dtype=precision_lib.compute_dtype(precision),
  )


#: :func:`_ascent` compiled: one program per classifier and static setting (steps, draws,
#: family, parametrization, path, compute dtype); ``lr, lo, hi, sigma_min`` are traced.
_optimize = jax.jit(
  _ascent,
  static_argnames=(
    "apply_fn",
    "steps",
    "num_samples",
    "family",
    "parametrization",
    "return_path",
    "compute_dtype",
  ),
)


def optimize_sigma(
  key: jax.Array | int,
  apply_fn: Callable,
  params: Any,
  x: ArrayLike,
  *,
  sigma0: ArrayLike,
  config: SigmaAscent | None = None,
  ids: ArrayLike | None = None,
  return_path: bool = False,
  precision: str | None = None,
  **ascent: Any,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
  """Per-input sigma by gradient ascent on the soft smoothed margin (DDRS Algorithm 1).

  For each input, ``steps`` steps of gradient ascent
  ``sigma <- max(sigma + lr * dR/dsigma, sigma_min)`` on
  ``R(sigma) = sigma/2 * (Phi^-1(clip(psi_A)) - Phi^-1(clip(psi_B)))``, with
  ``psi = mean softmax(apply_fn(x + sigma * z_j))`` over ``num_samples`` fresh
  normals per step (reparameterized: the gradient flows through the noise and the
  prefactor) and ``psi_A >= psi_B`` its two largest entries (the class is not
  fixed across steps). ``jnp.clip`` gives zero gradient to a saturated entry, as
  the reference's in-place clamp. All inputs run in parallel; the whole loop is one
  compiled program per (apply_fn, shapes, steps, num_samples, family,
  parametrization).

  What the paper's settings do (step 1e-4, K = 100, one draw; the defaults
  here): while psi_A is clamped at 0.98 the gradient is the constant
  ``(Phi^-1(0.98) - Phi^-1(0.02)) / 2 = 2.05``, and elsewhere it is O(1), so 100
  steps of 1e-4 move sigma by about 0.02 at most: sigma stays at sigma0 and the
  radii equal the fixed-sigma ones up to Monte-Carlo noise
  (``experiments/ddrs_mnist.py`` measures it on MNIST LeNets). Settings that do
  move sigma where the radius can grow: ``lr`` around 1e-2 with ``num_samples``
  8-16 (one draw makes the path a random walk), or ``parametrization="log"``
  (multiplicative steps; it needs a larger ``lr``, around 1-2, since
  ``dR/dlog sigma = sigma dR/dsigma``). Use the log form with care: on a
  slope-100 linear model with lr 2 and 16 draws it ran sigma away to 1e2-1e9
  (without the step clip: NaN), because at large sigma the Monte-Carlo top-2 gap
  is biased upward (the larger of two noisy estimates), so the estimated R grows
  like sigma; multiplicative steps follow that drift exponentially. Because psi is clamped, the soft
  objective grows with sigma as long as psi_A stays above 0.98, and on a nearly
  hard classifier it is flat (R ~ distance to the boundary) beyond: K and lr are
  the only stopping rule (IDRS App. C). Large plain steps on steep models are
  unstable (the reparameterized gradient is heavy-tailed near the boundary; a
  step of 0.02 with 16 draws sent one input of a slope-1000 linear model to
  ``sigma_min``). Hard smoothing (counts instead of softmax) has no useful
  gradient and is not offered.

  L1 / uniform variant (``family="uniform"``, DDRS §4.4): noise
  ``U[-lambda, lambda]^d`` and the objective ``lambda (psi_A - psi_B)``, no clamp.
  Convention: the optimized "sigma" IS the half-width lambda, as everywhere in
  rsjax (``rsjax.noise.Uniform``); to start from a Gaussian-equivalent standard
  deviation s pass ``sigma0 = sqrt(3) * s`` (the ``sigma *= 3**-0.5`` of the
  ddsmoothing scripts goes the other way and is not used). Certify it with
  ``certify(..., noise="uniform")``: radius ``2 lambda (p_A_lower - 1/2)``.

  Deviations from the reference: sigma is kept ``>= sigma_min`` (the reference has
  no projection, so a sigma could become <= 0); a step with a non-finite gradient
  is skipped; the log step is clipped to a factor ``e^(+-1/2)``.

  Args:
    key: ``jax.random.key`` or int seed (noise of input id i at step t from
      ``fold_in(fold_in(key, t), i)``; the key is not consumed).
    apply_fn: ``apply_fn(params, x) -> logits``; must be a hashable function
      (it is a static argument of the compiled loop).
    params: pytree for ``apply_fn``; not differentiated.
    x: ``[B, *input_shape]`` inputs.
    sigma0: float or ``[B]`` initial sigma (DDRS: the training sigma).
    config: a :class:`SigmaAscent` (``steps``, ``lr``, ``num_samples``,
      ``clip``, ``sigma_min``, ``family``, ``parametrization``; default
      ``SigmaAscent()``, the paper's settings). ``lr``, ``clip`` and
      ``sigma_min`` are traced: changing them does not recompile.
    ids: ``[B]`` dataset indices (reproducible noise per input; default positions).
    return_path: also return the ``[steps + 1, B]`` sigmas along the path.
    precision: the declared precision of the run (``rsjax.engine.precision``: the
      classifier is computed as the engine computes it; default ``"float32"``,
      full-precision matmuls also on GPUs whose JAX default is TF32).
    **ascent: :class:`SigmaAscent` fields as keywords (override ``config``).

  Returns:
    ``[B]`` float32 NumPy array of optimized sigmas (with ``return_path`` a pair
    ``(sigma, path)``).

  Raises:
    ValueError: for bad arguments (named in the message).
  """
  c = SigmaAscent.of(config, **ascent)
  x_np, sig0, ids_arr = check_inputs(x, sigma0, ids)
  sig0 = np.maximum(sig0, np.float32(c.sigma_min))
  f32 = np.float32
  out = precision_lib.traced_call(
    precision,
    _optimize,
    as_key(key),
    apply_fn,
    params,
    x_np,
    sig0,
    ids_arr,
    f32(c.lr),
    f32(c.clip[0]),
    f32(c.clip[1]),
    f32(c.sigma_min),
    steps=c.steps,
    num_samples=c.num_samples,
    family=c.family,
    parametrization=c.parametrization,
    return_path=bool(return_path),
  )
  out = jax.device_get(out)
  if return_path:
    return np.asarray(out[0], np.float32), np.asarray(out[1], np.float32)
  return np.asarray(out, np.float32)


@dataclasses.dataclass(frozen=True)
class OptimizedSigma:
  """DDRS's sigma source: ``evaluate(x, ids) -> SigmaValues`` with sigma optimized per input.

  A :class:`rsjax.SigmaSource` (the protocol of ``rsjax.noise.sigma``). DDRS's sigma
  depends on the input itself with no rate bound (``rate = inf``), so a radius
  at it is sound only after the memory (``rsjax.ddrs.certify(memory=...)``).

  Attributes:
    key: key of the ascent noise (``fold_in(key, t)`` per step).
    apply_fn, params: the classifier.
    sigma0: the starting sigma.
    config: the :class:`SigmaAscent`.
    precision: the declared precision of the run (``rsjax.engine.precision``).
  """

  key: jax.Array
  apply_fn: object
  params: object
  sigma0: float
  config: SigmaAscent = SigmaAscent()
  precision: str | None = None

  def evaluate(self, x: ArrayLike, ids: ArrayLike | None = None) -> SigmaValues:
    """``SigmaValues`` of ``x`` ``[B, *input_shape]``: sigma ``[B]`` float32, rate inf."""
    sigma = optimize_sigma(
      self.key,
      self.apply_fn,
      self.params,
      x,
      sigma0=self.sigma0,
      config=self.config,
      ids=ids,
      precision=self.precision,
    )
    return SigmaValues(sigma=sigma, rate=float("inf"), slack=np.zeros(sigma.shape))
