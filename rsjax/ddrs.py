"""DDRS: data-dependent smoothing (Alfarra, Bibi, Torr, Ghanem, UAI 2022).

Three parts:

* ``optimize_sigma``: per-input sigma by gradient ascent on the soft smoothed
  margin ``R(sigma) = sigma/2 * (Phi^-1(clip(psi_A)) - Phi^-1(clip(psi_B)))``
  (Algorithm 1), jit-compiled, all inputs in parallel.
* ``MemoryCertifier``: the memory-based post-processing (Algorithm 3) that keeps
  certified balls of different classes disjoint over a deployment run.
* ``certify``: Cohen's CERTIFY at the optimized per-input sigma, then the memory.

Soundness: a sigma chosen from x itself (as ``optimize_sigma`` does) changes the
smoothed classifier from input to input, so Cohen's radius at that sigma is NOT
a certificate of a fixed smoothed classifier (Súkeník et al., IDRS App. C). With
a ``MemoryCertifier`` the result is the memory-based guarantee of DDRS §3.5: it
holds for this deployment run, in this input order, only.
"""

from __future__ import annotations

import dataclasses
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np

from rsjax._certify import ABSTAIN, Certificate, Sampling
from rsjax._certify import certify as cohen_certify
from rsjax._sampling import prepare_inputs
from rsjax.util import as_key

__all__ = ["optimize_sigma", "sigma_ascent", "smoothing_objective", "MemoryCertifier",
           "DDRSCertificate", "certify", "FAMILIES", "PARAMETRIZATIONS"]


# ----------------------------------------------------------------------------- objective

#: The two objectives: ``"gaussian"`` (L2, Cohen-style soft margin) and
#: ``"uniform"`` (L1, Yang et al.: noise ``U[-lambda, lambda]^d``, sigma IS lambda).
FAMILIES = ("gaussian", "uniform")
#: How sigma is stepped: ``"sigma"`` (the paper: ascent on sigma) or ``"log"``
#: (ascent on log sigma: ``sigma <- sigma * exp(lr * sigma * dR/dsigma)``).
PARAMETRIZATIONS = ("sigma", "log")


def _objective(apply_fn, params, x, sigma, z, lo, hi, family="gaussian"):
  """R(sigma) of one input: x ``[*shape]``, z ``[n, *shape]`` unit noise, sigma scalar.

  Gaussian: ``sigma/2 (Phi^-1(clip psi_A) - Phi^-1(clip psi_B))``; uniform:
  ``sigma (psi_A - psi_B)`` (no clamp, DDRS §4.4).
  """
  logits = apply_fn(params, x[None] + sigma * z)  # [n, C]
  psi = jnp.mean(jax.nn.softmax(logits.astype(jnp.float32), axis=-1), axis=0)
  top2, _ = jax.lax.top_k(psi, 2)  # class not fixed across steps
  if family == "uniform":
    return sigma * (top2[0] - top2[1])
  top2 = jnp.clip(top2, lo, hi)  # zero gradient when saturated, like the in-place clamp
  return sigma / 2 * (jax.scipy.special.ndtri(top2[0]) - jax.scipy.special.ndtri(top2[1]))


def _unit_noise(family, key, shape):
  if family == "uniform":
    return jax.random.uniform(key, shape, jnp.float32, minval=-1.0, maxval=1.0)
  return jax.random.normal(key, shape, jnp.float32)


def _noise(key, step, ids, shape, num_samples, family="gaussian"):
  """``[B, n, *shape]`` unit noise; input i at step t from fold_in(fold_in(key, t), id_i)."""
  k_t = jax.random.fold_in(key, step)
  keys = jax.vmap(lambda i: jax.random.fold_in(k_t, i))(ids)
  return jax.vmap(lambda k: _unit_noise(family, k, (num_samples, *shape)))(keys)


def sigma_ascent(key, apply_fn, params, x, sigma0, ids, *, lr, steps: int, num_samples: int,
                 lo, hi, sigma_min, family: str = "gaussian", parametrization: str = "sigma",
                 return_path: bool = False):
  """The traceable ascent loop of :func:`optimize_sigma` (use inside ``jax.jit``).

  Args:
    key: a ``jax.random.key``; noise of input ``ids[i]`` at step t from
      ``fold_in(fold_in(key, t), ids[i])``.
    apply_fn: ``apply_fn(params, x) -> logits``.
    params: the classifier's pytree (not differentiated: wrapped in stop_gradient).
    x: ``[B, *input_shape]``.
    sigma0: ``[B]`` starting sigma.
    ids: ``[B]`` integer ids.
    lr, lo, hi, sigma_min: step size, psi clamp, lower bound on sigma (scalars).
    steps, num_samples: K and the noise draws per step (static).
    family, parametrization: see ``FAMILIES`` and ``PARAMETRIZATIONS`` (static).
    return_path: also return the ``[steps + 1, B]`` sigmas along the path.

  Returns:
    ``[B]`` optimized sigma (and the path when ``return_path``).
  """
  params = jax.lax.stop_gradient(params)  # the classifier is frozen
  obj = functools.partial(_objective, apply_fn, params, family=family)
  grad_fn = jax.vmap(jax.grad(obj, argnums=1), in_axes=(0, 0, 0, None, None))

  def body(sigma, t):
    z = _noise(key, t, ids, x.shape[1:], num_samples, family)
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


@functools.partial(jax.jit, static_argnames=("apply_fn", "steps", "num_samples", "family",
                                             "parametrization", "return_path"))
def _optimize(key, params, x, sigma0, ids, lr, lo, hi, sigma_min, *, apply_fn, steps, num_samples,
              family, parametrization, return_path):
  return sigma_ascent(key, apply_fn, params, x, sigma0, ids, lr=lr, steps=steps,
                      num_samples=num_samples, lo=lo, hi=hi, sigma_min=sigma_min, family=family,
                      parametrization=parametrization, return_path=return_path)


@functools.partial(jax.jit, static_argnames=("apply_fn", "num_samples", "family"))
def _evaluate(key, params, x, sigma, ids, lo, hi, *, apply_fn, num_samples, family):
  z = _noise(key, 0, ids, x.shape[1:], num_samples, family)
  fn = functools.partial(_objective, apply_fn, params, family=family)
  return jax.vmap(fn, in_axes=(0, 0, 0, None, None))(x, sigma, z, lo, hi)


def _check_choice(name, v, choices):
  if v not in choices:
    raise ValueError(f"{name} must be one of {choices}, got {v!r}")
  return v


def _check_common(x, sigma, ids, clip):
  x_np, _, ids_arr = prepare_inputs(x, 1.0, ids)
  b = x_np.shape[0]
  sig = np.asarray(sigma, np.float64)
  if sig.ndim == 0:
    sig = np.full((b,), float(sig))
  if sig.shape != (b,):
    raise ValueError(f"sigma0/sigma must be a float or of shape [B]={(b,)}, got shape {sig.shape}")
  if not np.all(np.isfinite(sig)) or np.any(sig <= 0):
    raise ValueError("sigma0/sigma must be finite and > 0")
  try:
    lo, hi = (float(c) for c in clip)
  except (TypeError, ValueError):
    raise ValueError(f"clip must be a pair (lo, hi), got {clip!r}") from None
  if not 0.0 < lo < hi < 1.0:
    raise ValueError(f"clip must satisfy 0 < lo < hi < 1, got {clip!r}")
  return x_np, sig.astype(np.float32), ids_arr, lo, hi


def _check_int(name, v, minimum):
  if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < minimum:
    raise ValueError(f"{name} must be an integer >= {minimum}, got {v!r}")
  return int(v)


def optimize_sigma(key, apply_fn, params, x, *, sigma0, steps: int = 100, lr: float = 1e-4,
                   num_samples: int = 1, clip=(0.02, 0.98), sigma_min: float = 1e-3,
                   ids=None, family: str = "gaussian", parametrization: str = "sigma",
                   return_path: bool = False):
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
    steps: K, number of ascent steps (paper 100).
    lr: step size alpha (paper 1e-4).
    num_samples: noise samples per step (paper 1).
    clip: ``(lo, hi)`` clamp of psi (DDRS scripts (0.02, 0.98); Gaussian only).
    sigma_min: lower bound kept on sigma.
    ids: ``[B]`` dataset indices (reproducible noise per input; default positions).
    family: ``"gaussian"`` (L2) or ``"uniform"`` (L1, sigma = lambda).
    parametrization: ``"sigma"`` (the paper) or ``"log"`` (ascent on log sigma).
    return_path: also return the ``[steps + 1, B]`` sigmas along the path.

  Returns:
    ``[B]`` float32 NumPy array of optimized sigmas (with ``return_path`` a pair
    ``(sigma, path)``).

  Raises:
    ValueError: for bad arguments (named in the message).
  """
  steps = _check_int("steps", steps, 0)
  num_samples = _check_int("num_samples", num_samples, 1)
  _check_choice("family", family, FAMILIES)
  _check_choice("parametrization", parametrization, PARAMETRIZATIONS)
  lr, sigma_min = float(lr), float(sigma_min)
  if not np.isfinite(lr) or lr < 0:
    raise ValueError(f"lr must be finite and >= 0, got {lr!r}")
  if not np.isfinite(sigma_min) or sigma_min <= 0:
    raise ValueError(f"sigma_min must be finite and > 0, got {sigma_min!r}")
  x_np, sig0, ids_arr, lo, hi = _check_common(x, sigma0, ids, clip)
  sig0 = np.maximum(sig0, np.float32(sigma_min))
  f32 = np.float32
  out = _optimize(as_key(key), params, x_np, sig0, ids_arr, f32(lr), f32(lo), f32(hi),
                  f32(sigma_min), apply_fn=apply_fn, steps=steps, num_samples=num_samples,
                  family=family, parametrization=parametrization, return_path=bool(return_path))
  out = jax.device_get(out)
  if return_path:
    return np.asarray(out[0], np.float32), np.asarray(out[1], np.float32)
  return np.asarray(out, np.float32)


def smoothing_objective(key, apply_fn, params, x, *, sigma, num_samples: int = 256,
                        clip=(0.02, 0.98), ids=None, family: str = "gaussian") -> np.ndarray:
  """Monte-Carlo estimate of R(sigma) per input (the quantity ``optimize_sigma`` ascends).

  Args:
    key: ``jax.random.key`` or int seed (same noise layout as ``optimize_sigma`` step 0).
    apply_fn: ``apply_fn(params, x) -> logits`` (hashable).
    params: pytree for ``apply_fn``.
    x: ``[B, *input_shape]`` inputs.
    sigma: float or ``[B]``.
    num_samples: noise samples per input.
    clip: ``(lo, hi)`` clamp of psi.
    ids: ``[B]`` dataset indices.
    family: ``"gaussian"`` or ``"uniform"`` (see ``optimize_sigma``).

  Returns:
    ``[B]`` float32 NumPy array of R estimates.
  """
  num_samples = _check_int("num_samples", num_samples, 1)
  _check_choice("family", family, FAMILIES)
  x_np, sig, ids_arr, lo, hi = _check_common(x, sigma, ids, clip)
  out = _evaluate(as_key(key), params, x_np, sig, ids_arr, np.float32(lo), np.float32(hi),
                  apply_fn=apply_fn, num_samples=num_samples, family=family)
  return np.asarray(jax.device_get(out), np.float32)


# ----------------------------------------------------------------------------- memory


def _toward_zero(v: float) -> float:
  """One float64 ulp toward zero: keeps touching balls disjoint despite rounding."""
  return float(np.nextafter(v, 0.0)) if v > 0 else 0.0


class MemoryCertifier:
  """Memory-based certification (DDRS Algorithm 3), exact in float64.

  ``update_batch`` computes the distances of a batch to all stored points in one
  device call and rechecks the few candidate balls exactly on the host.

  Inputs are processed in a fixed order; the memory holds triples
  ``(x_j, c_j, r_j)``. For a new ``(x, c, r)``, with ``d_j = ||x - x_j||_2`` on the
  flattened raw inputs, ball j intersects iff ``d_j < r_j + r``; ``J`` are the
  intersecting balls of another class. If ``J`` is empty ``(c, r)`` is kept;
  otherwise ``m = min_J (d_j - r_j)`` at ``j* = argmin`` (taken explicitly: the
  authors' ``rad, idx = torch.min(t)`` unpack fails on a 0-d tensor):

  * ``m < 0`` (x inside ``B(x_j*, r_j*)``): prediction ``c_j*``, radius ``|m|``
    (LargestInSubset);
  * ``m >= 0``: radius ``m`` (LargestOutSubset).

  The result is appended. Abstentions (class -1) are recorded but never form
  balls. Invariant: balls of different classes never intersect (new radii are
  rounded one ulp toward zero so that this also holds in floating point).
  """

  def __init__(self):
    self._x = None
    self._cls = np.zeros((0,), np.int64)
    self._radius = np.zeros((0,), np.float64)
    self._size = 0

  def __len__(self) -> int:
    return self._size

  @property
  def points(self) -> np.ndarray:
    """``[M, D]`` float64 flattened inputs in processing order."""
    return np.zeros((0, 0)) if self._x is None else self._x[:self._size].copy()

  @property
  def classes(self) -> np.ndarray:
    """``[M]`` int64 recorded classes (-1: abstain)."""
    return self._cls[:self._size].copy()

  @property
  def radii(self) -> np.ndarray:
    """``[M]`` float64 recorded radii."""
    return self._radius[:self._size].copy()

  def _append(self, x, cls, radius):
    if self._x is None:
      cap = 16
      self._x = np.zeros((cap, x.shape[0]), np.float64)
      self._cls = np.zeros((cap,), np.int64)
      self._radius = np.zeros((cap,), np.float64)
    elif self._size == self._x.shape[0]:
      cap = 2 * self._size
      self._x = np.concatenate([self._x, np.zeros_like(self._x)])[:cap]
      self._cls = np.concatenate([self._cls, np.zeros_like(self._cls)])[:cap]
      self._radius = np.concatenate([self._radius, np.zeros_like(self._radius)])[:cap]
    self._x[self._size] = x
    self._cls[self._size] = cls
    self._radius[self._size] = radius
    self._size += 1

  def _check(self, xf, cls, radius):
    if not np.isfinite(radius) or radius < 0:
      raise ValueError(f"radius must be finite and >= 0, got {radius!r}")
    if cls < ABSTAIN:
      raise ValueError(f"cls must be a class index or -1 (abstain), got {cls}")
    if not np.all(np.isfinite(xf)):
      raise ValueError("x must be finite")
    if self._x is not None and xf.shape[0] != self._x.shape[1]:
      raise ValueError(f"x has {xf.shape[0]} values, the memory holds inputs of {self._x.shape[1]}")

  def _decide(self, xf, cls, radius, d_approx=None):
    """Algorithm 3 for one input against the memory, then append.

    ``d_approx`` (``[len(self)]`` float32 distances computed on device) only
    selects candidates: a stored ball can intersect only if
    ``d_approx - tol < r_j + r`` with ``tol`` far above float32 rounding; the
    candidates' distances are then recomputed exactly in float64 here.
    """
    if cls != ABSTAIN and self._size:
      mem_c = self._cls[:self._size]
      mem_r = self._radius[:self._size]
      other = (mem_c != ABSTAIN) & (mem_c != cls)
      if d_approx is not None:
        d_approx = np.asarray(d_approx, np.float64)
        tol = _DIST_RTOL * d_approx + _DIST_ATOL
        other &= d_approx - tol < mem_r + radius
      idx = np.flatnonzero(other)
      if idx.size:
        d = np.sqrt(np.sum((self._x[idx] - xf) ** 2, axis=1))  # exact float64
        hit = d < mem_r[idx] + radius
        if np.any(hit):
          idx, d = idx[hit], d[hit]
          gaps = d - mem_r[idx]
          k = int(np.argmin(gaps))
          j_star, m = idx[k], float(gaps[k])
          if m < 0:  # LargestInSubset: x lies inside a ball of another class
            cls, radius = int(mem_c[j_star]), _toward_zero(-m)
          else:  # LargestOutSubset
            radius = _toward_zero(m)
    self._append(xf, cls, radius)
    return cls, radius

  def update(self, x, cls, radius) -> tuple[int, float]:
    """Processes one certified input and records it.

    Args:
      x: ``[*input_shape]`` raw input (flattened for distances).
      cls: certified class, or -1 (abstain).
      radius: certified L2 radius (>= 0).

    Returns:
      ``(cls, radius)`` after the memory check.

    Raises:
      ValueError: for a bad radius/class or an input of another size than the memory's.
    """
    xf = np.asarray(x, np.float64).reshape(-1)
    cls, radius = int(cls), float(radius)
    self._check(xf, cls, radius)
    return self._decide(xf, cls, radius)

  def update_batch(self, x, cls, radius) -> tuple[np.ndarray, np.ndarray]:
    """``update`` for each input of a batch, in order, with distances on device.

    The distances of the batch to every stored point and to each other are
    computed in one compiled call (float32, ``[B, M + B]``); they only select
    the few stored balls that can intersect, whose distances are recomputed
    exactly in float64 (so the result equals ``update`` input by input).

    Args:
      x: ``[B, *input_shape]`` raw inputs.
      cls: ``[B]`` classes (-1 abstain).
      radius: ``[B]`` radii.

    Returns:
      ``(cls [B] int64, radius [B] float64)`` after the memory.
    """
    x = np.asarray(x)
    cls = np.asarray(cls).reshape(-1)
    radius = np.asarray(radius, np.float64).reshape(-1)
    if x.ndim < 1 or not x.shape[0] == cls.shape[0] == radius.shape[0]:
      raise ValueError(f"x, cls and radius must share the batch size, got {x.shape}, "
                       f"{cls.shape}, {radius.shape}")
    b = cls.shape[0]
    xf = x.reshape(b, -1).astype(np.float64)
    for i in range(b):
      self._check(xf[i], int(cls[i]), float(radius[i]))
    m0 = self._size
    pts = xf if m0 == 0 else np.concatenate([self._x[:m0], xf])
    d_all = np.asarray(jax.device_get(_distances(xf.astype(np.float32), pts.astype(np.float32))))
    out_c = np.empty(b, np.int64)
    out_r = np.empty(b, np.float64)
    for i in range(b):
      out_c[i], out_r[i] = self._decide(xf[i], int(cls[i]), float(radius[i]), d_all[i, :m0 + i])
    return out_c, out_r


#: Tolerance on the float32 device distances used to pick candidate balls
#: (float32 rounding of a 10^5-term sum of squares is below 1e-5 relative).
_DIST_RTOL, _DIST_ATOL = 1e-3, 1e-5


@jax.jit
def _distances(a, b):
  """``[A, D]``, ``[M, D]`` -> ``[A, M]`` float32 L2 distances (row by row)."""
  return jax.lax.map(lambda ai: jnp.sqrt(jnp.sum((b - ai) ** 2, axis=1)), a)


# ----------------------------------------------------------------------------- certify


_NOT_A_CERTIFICATE = (
    "NOT A CERTIFICATE of a fixed classifier: Cohen's radius (binary, one-sided "
    "Clopper-Pearson) at a sigma optimized for each input (DDRS); the smoothed classifier changes "
    "with sigma, so the radius is not sound for any fixed smoothed classifier (Súkeník et al., "
    "IDRS App. C). Use the memory (DDRS memory-based guarantee) or rsjax.idrs for a sound "
    "input-dependent certificate")
_MEMORY_GUARANTEE = (
    "DDRS memory-based guarantee (Alfarra et al. 2022, Algorithm 3): Cohen's radius (binary "
    "Gaussian L2, one-sided Clopper-Pearson) at the per-input optimized sigma, post-processed so "
    "that certified balls of different classes never intersect; valid only for this deployment "
    "run and this input order (the memory's earlier inputs), not a certificate of a fixed "
    "smoothed classifier")


@dataclasses.dataclass(frozen=True)
class DDRSCertificate(Certificate):
  """A ``Certificate`` at per-input optimized sigma, optionally after the memory.

  Attributes:
    sigma: ``[B]`` float64 sigma used at each input.
    prediction_mc: ``[B]`` Monte-Carlo prediction before the memory.
    radius_mc: ``[B]`` Monte-Carlo radius before the memory.
    memory_used: whether a ``MemoryCertifier`` post-processed the result.
  """

  sigma: np.ndarray | None = None
  prediction_mc: np.ndarray | None = None
  radius_mc: np.ndarray | None = None
  memory_used: bool = False


def certify(key, apply_fn, params, x, *, sigma, num_classes: int, settings: Sampling | None = None,
            ids=None, memory: MemoryCertifier | None = None, **sampling) -> DDRSCertificate:
  """Cohen's CERTIFY at per-input sigma (DDRS ``certify_ds``), then the optional memory.

  Args:
    key: ``jax.random.key`` or int seed (passed to ``rsjax.certify``: selection
      and estimation keys ``fold_in(key, 0)`` / ``fold_in(key, 1)``).
    apply_fn: ``apply_fn(params, x) -> logits``.
    params: pytree for ``apply_fn``.
    x: ``[B, *input_shape]`` inputs.
    sigma: ``[B]`` per-input sigma (e.g. from ``optimize_sigma``).
    num_classes: number of classes C.
    settings: an ``rsjax.Sampling``. Its noise is Gaussian (L2) or
      ``"uniform"`` (the L1 variant: sigma is the half-width lambda, radius
      ``2 lambda (p_A_lower - 1/2)``, Yang et al.).
    ids: ``[B]`` dataset indices.
    memory: a ``MemoryCertifier``; when given, the inputs are passed through it in
      their order (the memory is updated in place). Gaussian noise only (the
      memory works with L2 balls).
    **sampling: ``rsjax.Sampling`` fields as keywords (override ``settings``).

  Returns:
    ``DDRSCertificate``; ``guarantee`` says what (little) it guarantees, and
    ``sound`` is True only with the memory (its deployment-run guarantee).

  Raises:
    ValueError: for bad arguments.
  """
  settings = Sampling.of(settings, **sampling)
  x_np, _, _ = prepare_inputs(x, 1.0, ids)
  sig = np.asarray(sigma, np.float32)
  if sig.shape != (x_np.shape[0],):
    raise ValueError(f"sigma must have shape [B]={(x_np.shape[0],)}, got {sig.shape}")
  if memory is not None and not isinstance(memory, MemoryCertifier):
    raise ValueError(f"memory must be a MemoryCertifier or None, got {memory!r}")
  if memory is not None and settings.noise.norm != "l2":
    raise ValueError("the memory works with L2 balls: use Gaussian noise (noise=None) with it")
  base = cohen_certify(key, apply_fn, params, x_np, sigma=sig, num_classes=num_classes,
                       settings=settings, ids=ids)
  pred, rad = base.prediction, base.radius
  if memory is None:
    guarantee = _NOT_A_CERTIFICATE + f" (alpha={settings.alpha}, {settings.noise.name} noise)"
  else:
    pred, rad = memory.update_batch(x_np, pred, rad)
    guarantee = _MEMORY_GUARANTEE + f" (alpha={settings.alpha} per input)"
  return DDRSCertificate(
      prediction=np.asarray(pred, np.int64),
      radius=np.asarray(rad, np.float64),
      p_lower=base.p_lower,
      counts=base.counts,
      counts_selection=base.counts_selection,
      norm=base.norm,
      guarantee=guarantee,
      sound=memory is not None,
      sigma=sig.astype(np.float64),
      prediction_mc=base.prediction,
      radius_mc=base.radius,
      memory_used=memory is not None,
  )


# ----------------------------------------------------------------------------- a dataset


def memory_path(out_path) -> str:
  """The Monte-Carlo rows (before the memory) of :func:`certify_dataset`'s ``out_path``."""
  return os.fspath(out_path) + ".mc.tsv"


MC_COLUMNS = ("sigma",)
MEMORY_COLUMNS = ("sigma", "predict_mc", "radius_mc", "memory_changed")


def certify_dataset(key, apply_fn, params, get_batch, indices, out_path, *, sigma0: float,
                    num_classes: int, steps: int = 100, lr: float = 1e-4, num_samples: int = 1,
                    clip=(0.02, 0.98), parametrization: str = "sigma", family: str = "gaussian",
                    n0: int = 100, n: int = 100_000, alpha: float = 0.001,
                    batch_size: int = 1000, inputs_per_call: int = 8, memory: bool = True,
                    run: dict | None = None, progress: bool = True, resume: bool = True) -> dict:
  """DDRS for a dataset: optimize sigma per input, CERTIFY with it, then the memory.

  1. For each chunk of ``indices`` (in order): ``optimize_sigma`` (key
     ``fold_in(key, 2)``), then Cohen's CERTIFY at the optimized sigma (``key``);
     the rows, with the per-input ``sigma`` column, go to
     ``memory_path(out_path)`` (``<out>.mc.tsv``), resumably (``rsjax.runner``).
  2. With ``memory``, the memory step (Algorithm 3) over those rows in the file's
     order (= the order of ``indices``, recorded in the row order of
     ``out_path``), written to ``out_path`` with columns ``sigma``,
     ``predict_mc``, ``radius_mc``, ``memory_changed``. It is recomputed from
     the Monte-Carlo rows on every call (it is cheap and deterministic).

  Guarantee: the rows of ``out_path`` carry the DDRS memory-based guarantee (for
  this deployment run and this order). The Monte-Carlo rows alone are NOT a
  certificate of any fixed smoothed classifier (``certify``'s docstring).

  Args:
    key: ``jax.random.key`` or int seed.
    apply_fn, params: the classifier.
    get_batch: ``get_batch(indices) -> (x [b, ...], labels [b])``.
    indices: dataset indices, in the processing order.
    out_path: final result file (Cohen's format plus the columns above).
    sigma0, steps, lr, num_samples, clip, parametrization, family: see
      ``optimize_sigma``.
    num_classes, n0, n, alpha, batch_size: CERTIFY settings.
    inputs_per_call: inputs per chunk.
    memory: run the memory step (False: only the Monte-Carlo rows).
    run: extra identity of the run for the result files' run records.
    progress: progress bar.
    resume: keep the Monte-Carlo rows already written.

  Returns:
    ``{"mc_path", "out_path" (None without memory), "changed": number of
    certificates the memory changed, "guarantee"}``.
  """
  from rsjax import io, runner

  key = as_key(key)
  k_opt = jax.random.fold_in(key, 2)
  noise = "uniform" if family == "uniform" else None
  settings = dict(method="ddrs", sigma0=float(sigma0), steps=int(steps), lr=float(lr),
                  num_samples=int(num_samples), clip=[float(c) for c in clip],
                  parametrization=parametrization, family=family, n0=int(n0), n=int(n),
                  alpha=float(alpha), key=np.asarray(jax.random.key_data(key)).tolist(),
                  **(run or {}))

  def fn(x, ids):
    sig = optimize_sigma(k_opt, apply_fn, params, x, sigma0=sigma0, steps=steps, lr=lr,
                         num_samples=num_samples, clip=clip, ids=ids, family=family,
                         parametrization=parametrization)
    return certify(key, apply_fn, params, x, sigma=sig, num_classes=num_classes, n0=n0, n=n,
                   alpha=alpha, batch_size=batch_size, ids=ids, noise=noise)

  mc = memory_path(out_path)
  runner.certify_dataset(fn, get_batch, indices, mc, inputs_per_call=inputs_per_call,
                         extra_columns=MC_COLUMNS,
                         extra_fn=lambda cert, j: {"sigma": repr(float(cert.sigma[j]))},
                         progress=progress, resume=resume, run=settings)
  out = {"mc_path": mc, "out_path": None, "changed": 0, "guarantee": _NOT_A_CERTIFICATE}
  if not memory:
    return out
  rows = io.read_certify(mc)
  x, _ = get_batch(rows.idx)
  mem = MemoryCertifier()
  pred, rad = mem.update_batch(np.asarray(x), rows.predict, rows.radius)
  changed = (pred != rows.predict) | (rad != rows.radius)
  with io.ResultsWriter(out_path, kind="certify", resume=False, extra_columns=MEMORY_COLUMNS,
                        run=dict(settings, memory=True, guarantee=_MEMORY_GUARANTEE)) as w:
    for j in range(len(rows)):
      w.write(idx=int(rows.idx[j]), label=int(rows.label[j]), predict=int(pred[j]),
              radius=float(rad[j]) if pred[j] >= 0 else 0.0, time=float(rows.time[j]),
              sigma=repr(float(rows.extra["sigma"][j])), predict_mc=int(rows.predict[j]),
              radius_mc=repr(float(rows.radius[j])), memory_changed=int(changed[j]))
  return dict(out, out_path=os.fspath(out_path), changed=int(changed.sum()),
              guarantee=_MEMORY_GUARANTEE)
