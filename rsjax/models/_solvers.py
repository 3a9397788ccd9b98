"""Batched fixed-point solvers with a static step count (device).

A deep equilibrium model (DEQ) computes ``z* = f(z*)``. For certification every
noisy sample is one row of a batch ``z [B, ...]`` and the rows are independent
(``f`` must act per sample: no BatchNorm across the batch), so every quantity
here is per sample: residuals, the Anderson history and its small
``(m+1) x (m+1)`` linear solves.

The cost is static: ``steps`` evaluations of ``f`` in a ``lax.fori_loop`` (the
"kA" / "kN" of Gao et al. 2024: ``steps=30`` Anderson is "30A"). With ``tol``
the loop may stop early, but only once *every* sample has converged (a batch
runs as fast as its slowest sample); with ``early_stop=False`` the tolerance is
only reported in ``SolverResult.converged``.

Three solvers, named as in the paper by their letter after the step count:
plain iteration ("kN", ``"iteration"`` alias ``"naive"``), Anderson
acceleration ("kA") and Broyden's method ("kB"). ``SolverConfig.label`` gives the
name ("30A") and ``as_solver_config("3B")`` parses it. One step of any of them
from ``z0`` is one plain step ``f(z0)``.

The relative residual reported is the one of MDEQ (Bai et al. 2020):
``||f(x) - x|| / (||f(x)|| + 1e-8)`` at the last point ``x`` where ``f`` was
evaluated. The returned state ``z`` is the solver's next iterate (``f(x)`` for
plain iteration, the Anderson extrapolation for Anderson), so one more step of
either solver from ``z`` continues the same sequence (warm starts; Broyden
restarts its Jacobian estimate from ``-I`` at every call, as in MDEQ).

Memory per sample: Anderson keeps ``2 m D`` floats of history; Broyden keeps
two rank-one factors of size ``D`` per step (``2 (steps - 1) D`` floats), which
is why the paper uses it only with few steps or small states.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from rsjax.models._solver_config import SOLVERS, SolverConfig, SolverResult, as_solver_config

_EPS = 1e-8

#: A solver's loop carry (its state between steps).
_Carry = TypeVar("_Carry")
#: Broyden's carry: ``(x, g(x), step d, U, V)``, ``[B, D]`` each, ``U, V [B, S, D]``.
_BroydenCarry = tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]
#: A batched map on flat ``[B, D]`` states.
_FlatMap = Callable[[jax.Array], jax.Array]

__all__ = [
  "SolverConfig",
  "broyden",
  "SolverResult",
  "SOLVERS",
  "as_solver_config",
  "anderson",
  "fixed_point_iteration",
  "relative_residual",
  "solve",
]


def _flat(z: jax.Array) -> jax.Array:
  return z.reshape(z.shape[0], -1)


def relative_residual(fx: jax.Array, x: jax.Array) -> jax.Array:
  """Per-sample ``||fx - x|| / (||fx|| + 1e-8)`` over all non-batch axes: ``[B]``."""
  diff = jnp.linalg.norm(_flat(fx - x).astype(jnp.float32), axis=1)
  return diff / (jnp.linalg.norm(_flat(fx).astype(jnp.float32), axis=1) + _EPS)


def _loop(
  step_fn: Callable[[jax.Array, _Carry], tuple[_Carry, jax.Array]],
  carry0: _Carry,
  res0: jax.Array,
  cfg: SolverConfig,
  first: int,
) -> tuple[_Carry, jax.Array, jax.Array]:
  """Runs ``step_fn(k, carry) -> (carry, residual)`` for k in [first, cfg.steps)."""
  if cfg.tol is not None and cfg.early_stop:
    tol = jnp.float32(cfg.tol)

    def cond(state: tuple[jax.Array, _Carry, jax.Array]) -> jax.Array:
      k, _, res = state
      return (k < cfg.steps) & jnp.any(~(res <= tol))

    def while_body(
      state: tuple[jax.Array, _Carry, jax.Array],
    ) -> tuple[jax.Array, _Carry, jax.Array]:
      k, carry, _ = state
      carry, res = step_fn(k, carry)
      return k + 1, carry, res

    k, carry, res = jax.lax.while_loop(cond, while_body, (jnp.int32(first), carry0, res0))
    return carry, res, k

  def fori_body(k: jax.Array, state: tuple[_Carry, jax.Array]) -> tuple[_Carry, jax.Array]:
    carry, _ = state
    return step_fn(k, carry)

  carry, res = jax.lax.fori_loop(first, cfg.steps, fori_body, (carry0, res0))
  return carry, res, jnp.int32(cfg.steps)


def _converged(res: jax.Array, cfg: SolverConfig) -> jax.Array:
  if cfg.tol is None:
    return jnp.isfinite(res)
  return res <= cfg.tol


def fixed_point_iteration(
  f: Callable[[jax.Array], jax.Array],
  z0: jax.Array,
  *,
  config: SolverConfig | None = None,
  steps: int | None = None,
  tol: float | None = None,
) -> SolverResult:
  """Plain fixed-point iteration ``z_{k+1} = f(z_k)`` ("naive", "kN").

  Args:
    f: batched map ``[B, ...] -> [B, ...]`` acting independently per sample.
    z0: ``[B, ...]`` initial state (zeros, or a warm start).
    config: a ``SolverConfig`` (its ``name`` is ignored); or give ``steps``/``tol``.
    steps: evaluations of ``f`` (overrides ``config.steps``).
    tol: relative residual tolerance (overrides ``config.tol``).

  Returns:
    ``SolverResult`` with ``z = f^steps(z0)``.
  """
  cfg = _resolve(config, "iteration", steps, tol)
  res0 = jnp.full((z0.shape[0],), jnp.inf, jnp.float32)

  def step(k: jax.Array, z: jax.Array) -> tuple[jax.Array, jax.Array]:
    fz = f(z)
    return fz, relative_residual(fz, z)

  z, res, k = _loop(step, z0, res0, cfg, 0)
  return SolverResult(z=z, residual=res, steps=k, converged=_converged(res, cfg))


def _spd_solve_ones(a: jax.Array) -> jax.Array:
  """``a^{-1} 1`` for a batch of small SPD matrices ``a [B, n, n]`` -> ``[B, n]``.

  Jacobi-scaled Cholesky and triangular solves in ``lax.fori_loop`` over the
  size ``n`` (plain jnp ops, small programs). There is deliberately no LAPACK
  custom call: batched LAPACK solves inside a multi-device CPU ``shard_map``
  were seen to deadlock (2 cores, 4 forced host devices).
  """
  n = a.shape[-1]
  rows = jnp.arange(n)
  inv_sqrt_d = jax.lax.rsqrt(jnp.diagonal(a, axis1=1, axis2=2))  # [B, n]
  a = a * inv_sqrt_d[:, :, None] * inv_sqrt_d[:, None, :]

  # Column j of the Cholesky factor (columns >= j of low are 0).
  def chol(j: jax.Array, low: jax.Array) -> jax.Array:
    v = a[:, :, j] - jnp.einsum("bik,bk->bi", low, low[:, j, :])
    v = jnp.where(rows >= j, v, 0.0)
    piv = jnp.maximum(jnp.take(v, j, axis=1), 1e-30)
    return low.at[:, :, j].set(v * jax.lax.rsqrt(piv)[:, None])

  low = jax.lax.fori_loop(0, n, chol, jnp.zeros_like(a))
  diag = jnp.diagonal(low, axis1=1, axis2=2)

  def fwd(i: jax.Array, w: jax.Array) -> jax.Array:  # low w = inv_sqrt_d
    acc = jnp.take(inv_sqrt_d, i, axis=1) - jnp.einsum("bk,bk->b", low[:, i, :], w)
    return w.at[:, i].set(acc / jnp.take(diag, i, axis=1))

  w = jax.lax.fori_loop(0, n, fwd, jnp.zeros_like(inv_sqrt_d))

  def bwd(t: jax.Array, y: jax.Array) -> jax.Array:  # low^T y = w
    i = n - 1 - t
    acc = jnp.take(w, i, axis=1) - jnp.einsum("bk,bk->b", low[:, :, i], y)
    return y.at[:, i].set(acc / jnp.take(diag, i, axis=1))

  y = jax.lax.fori_loop(0, n, bwd, jnp.zeros_like(inv_sqrt_d))
  return y * inv_sqrt_d


def _anderson_mix(
  F: jax.Array,
  G: jax.Array,
  gram: jax.Array,
  count: jax.Array,
  latest: jax.Array,
  cfg: SolverConfig,
) -> jax.Array:
  """Anderson extrapolation from a ring-buffer history.

  Args:
    F: ``[B, m, D]`` images ``f(X)`` of the points ``X`` where ``f`` was evaluated.
    G: ``[B, m, D]`` float32 residuals ``F - X``.
    gram: ``[B, m, m]`` float32 ``G G^T``, kept up to date one row per step
      (``_gram_update``): recomputing it from ``G`` every step is a batch of tiny
      matrix products, the larger part of a step's time on CPU.
    count: int scalar, number of valid history slots (``<= m``); valid slots are
      ``0 .. count-1`` (the ring buffer fills in order).
    latest: int scalar, the slot of the last evaluation.

  Returns:
    ``[B, D]`` the next iterate ``sum_j a_j (beta F_j + (1 - beta) X_j)`` with the
    weights ``a`` minimizing ``||sum_j a_j (F_j - X_j)||^2 + lam ||a||^2`` subject
    to ``sum_j a_j = 1``: ``a = H^{-1} 1 / (1^T H^{-1} 1)`` with the per-sample
    ``m x m`` matrix ``H = G G^T + lam I`` (equivalent to MDEQ's ``(m+1) x (m+1)``
    KKT system). Unused slots get ``H_jj = 1``, no coupling and weight 0.
    Where the solve breaks down (``H`` numerically singular: a tiny ``lam`` with
    a repeated or vanishing residual; non-finite weights or result), that sample
    takes a plain (damped) step from the last evaluation instead of NaN.
  """
  m = F.shape[1]
  valid = (jnp.arange(m) < count).astype(jnp.float32)  # [m]
  h = gram * (valid[:, None] * valid[None, :])
  h = h + jnp.diag(jnp.maximum(cfg.lam, 1e-30) * valid + (1.0 - valid))
  y = _spd_solve_ones(h) * valid
  alpha = (y / jnp.sum(y, axis=1, keepdims=True)).astype(F.dtype)  # [B, m]
  mixed = jnp.einsum("bj,bjd->bd", alpha, F)
  plain = jax.lax.dynamic_index_in_dim(F, latest, 1, keepdims=False)
  if cfg.beta != 1.0:  # beta F + (1 - beta) X = F - (1 - beta) G
    damp = 1.0 - cfg.beta
    mixed = mixed - damp * jnp.einsum("bj,bjd->bd", alpha.astype(G.dtype), G).astype(F.dtype)
    plain = plain - damp * jax.lax.dynamic_index_in_dim(G, latest, 1, keepdims=False).astype(
      F.dtype
    )
  ok = jnp.all(jnp.isfinite(alpha), axis=1) & jnp.all(jnp.isfinite(mixed), axis=1)
  return jnp.where(ok[:, None], mixed, plain)


def _gram_update(
  G: jax.Array, gram: jax.Array, g: jax.Array, slot: ArrayLike
) -> tuple[jax.Array, jax.Array]:
  """Writes residual ``g [B, D]`` into slot ``slot`` of ``G`` and row/column ``slot`` of
  ``gram = G G^T`` (one batched matrix-vector product instead of the whole product)."""
  G = jax.lax.dynamic_update_index_in_dim(G, g, slot, 1)
  row = jnp.einsum("bd,bjd->bj", g, G, precision=jax.lax.Precision.HIGHEST)  # [B, m]
  gram = jax.lax.dynamic_update_index_in_dim(gram, row, slot, 1)
  gram = jax.lax.dynamic_update_index_in_dim(gram, row, slot, 2)
  return G, gram


def _first_evaluation(
  f: Callable[[jax.Array], jax.Array], z0: jax.Array
) -> tuple[_FlatMap, jax.Array, jax.Array, jax.Array]:
  """``(ff, x0, f(x0), residual)`` on flat ``[B, D]`` states; ``ff`` is ``f`` on flat states."""

  def ff(x: jax.Array) -> jax.Array:
    return _flat(f(x.reshape(z0.shape)))

  x0 = _flat(z0)
  f0 = ff(x0)
  return ff, x0, f0, relative_residual(f0, x0)


def anderson(
  f: Callable[[jax.Array], jax.Array],
  z0: jax.Array,
  *,
  config: SolverConfig | None = None,
  steps: int | None = None,
  tol: float | None = None,
) -> SolverResult:
  """Anderson acceleration (type II, as in MDEQ's ``anderson``), batched.

  The history of the last ``m`` values ``F = f(X)`` and residuals ``G = F - X``
  lives in ring buffers ``[B, m, D]`` in the loop carry, with ``G G^T``
  ``[B, m, m]`` updated one row per step. Evaluation ``k`` (0-based) is at
  ``x_k``: ``x_0 = z0`` and ``x_k`` is the Anderson mix of the history for
  ``k >= 1`` (``x_1 = beta f(z0) + (1 - beta) z0``, so one step of Anderson with
  ``beta=1`` equals one step of plain iteration). After ``steps`` evaluations the
  result is the next mix ``x_steps``; with ``steps=1`` that is the plain
  (damped) step itself, computed without a history.

  Args:
    f: batched map ``[B, ...] -> [B, ...]`` acting independently per sample.
    z0: ``[B, ...]`` initial state (zeros, or a warm start).
    config: a ``SolverConfig`` (memory ``m``, ridge ``lam``, mixing ``beta``).
    steps: evaluations of ``f`` (overrides ``config.steps``).
    tol: relative residual tolerance (overrides ``config.tol``).

  Returns:
    ``SolverResult``.
  """
  cfg = _resolve(config, "anderson", steps, tol)
  m = min(cfg.m, cfg.steps)  # slots that can ever fill (a smaller history is the same solver)
  ff, x0, f0, res0 = _first_evaluation(f, z0)
  if cfg.steps == 1:  # the mix of a one-slot history is the plain (damped) step
    z = f0 if cfg.beta == 1.0 else cfg.beta * f0 + (1.0 - cfg.beta) * x0
    return SolverResult(
      z=z.reshape(z0.shape), residual=res0, steps=jnp.int32(1), converged=_converged(res0, cfg)
    )
  b, d = x0.shape
  F = jnp.zeros((b, m, d), f0.dtype).at[:, 0].set(f0)
  G, gram = _gram_update(
    jnp.zeros((b, m, d), jnp.float32),
    jnp.zeros((b, m, m), jnp.float32),
    (f0 - x0).astype(jnp.float32),
    0,
  )

  def step(
    k: jax.Array, carry: tuple[jax.Array, jax.Array, jax.Array]
  ) -> tuple[tuple[jax.Array, jax.Array, jax.Array], jax.Array]:
    F, G, gram = carry
    x = _anderson_mix(F, G, gram, jnp.minimum(k, m), (k - 1) % m, cfg)
    fx = ff(x)
    slot = k % m
    F = jax.lax.dynamic_update_index_in_dim(F, fx, slot, 1)
    G, gram = _gram_update(G, gram, (fx - x).astype(jnp.float32), slot)
    return (F, G, gram), relative_residual(fx, x)

  (F, G, gram), res, k = _loop(step, (F, G, gram), res0, cfg, 1)
  z = _anderson_mix(F, G, gram, jnp.minimum(k, m), (k - 1) % m, cfg).reshape(z0.shape)
  return SolverResult(z=z, residual=res, steps=k, converged=_converged(res, cfg))


def _lowrank(U: jax.Array, V: jax.Array, x: jax.Array, transpose: bool = False) -> jax.Array:
  """``H x`` (or ``x^T H``) for ``H = -I + sum_j U_j V_j^T``; ``U, V [B, S, D]``, ``x [B, D]``."""
  if transpose:
    return -x + jnp.einsum("bs,bsd->bd", jnp.einsum("bd,bsd->bs", x, U), V)
  return -x + jnp.einsum("bs,bsd->bd", jnp.einsum("bd,bsd->bs", x, V), U)


def broyden(
  f: Callable[[jax.Array], jax.Array],
  z0: jax.Array,
  *,
  config: SolverConfig | None = None,
  steps: int | None = None,
  tol: float | None = None,
) -> SolverResult:
  """Broyden's method ("good" Broyden on ``g(z) = f(z) - z``, as in MDEQ), batched.

  The inverse Jacobian estimate of ``g`` starts at ``H = -I`` and receives one
  rank-one update ``u v^T`` per step (Sherman-Morrison form of Broyden's good
  update, no line search); the factors live in ``[B, steps - 1, D]`` buffers of
  the loop carry. Evaluation ``k`` is at ``x_k``: ``x_0 = z0``,
  ``x_{k+1} = x_k - H_k g(x_k)`` (so ``x_1 = f(z0)``: one Broyden step is one
  plain step). After ``steps`` evaluations the result is ``x_steps``. An update
  whose denominator ``v^T dg`` vanishes or is not finite is skipped, for that
  sample only.

  Args and returns as ``anderson``; the config's ``m``, ``lam`` and ``beta`` are
  not used.
  """
  cfg = _resolve(config, "broyden", steps, tol)
  ff, x0, f0, res0 = _first_evaluation(f, z0)
  g0 = (f0 - x0).astype(jnp.float32)
  U = jnp.zeros((x0.shape[0], max(cfg.steps - 1, 1), x0.shape[1]), jnp.float32)
  V = jnp.zeros_like(U)

  def step(k: jax.Array, carry: _BroydenCarry) -> tuple[_BroydenCarry, jax.Array]:
    x, g, d, U, V = carry
    x_new = (x.astype(jnp.float32) + d).astype(x.dtype)
    fx = ff(x_new)
    g_new = (fx - x_new).astype(jnp.float32)
    dx, dg = d, g_new - g
    v = _lowrank(U, V, dx, transpose=True)
    den = jnp.sum(v * dg, axis=1)
    ok = jnp.isfinite(den) & (jnp.abs(den) > 1e-30)
    u = (dx - _lowrank(U, V, dg)) / jnp.where(ok, den, 1.0)[:, None]
    ok = ok & jnp.all(jnp.isfinite(u), axis=1) & jnp.all(jnp.isfinite(v), axis=1)
    U = jax.lax.dynamic_update_index_in_dim(U, jnp.where(ok[:, None], u, 0.0), k - 1, 1)
    V = jax.lax.dynamic_update_index_in_dim(V, jnp.where(ok[:, None], v, 0.0), k - 1, 1)
    d_new = -_lowrank(U, V, g_new)
    return (x_new, g_new, d_new, U, V), relative_residual(fx, x_new)

  (x, _, d, _, _), res, k = _loop(step, (x0, g0, g0, U, V), res0, cfg, 1)
  z = (x.astype(jnp.float32) + d).astype(x0.dtype).reshape(z0.shape)
  return SolverResult(z=z, residual=res, steps=k, converged=_converged(res, cfg))


def _resolve(
  config: SolverConfig | None, default_name: str, steps: int | None, tol: float | None
) -> SolverConfig:
  cfg = config if config is not None else SolverConfig(name=default_name)
  return as_solver_config(cfg, steps, **({} if tol is None else {"tol": tol}))


def solve(
  f: Callable[[jax.Array], jax.Array],
  z0: jax.Array,
  config: SolverConfig | str = "anderson",
  *,
  steps: int | None = None,
  tol: float | None = None,
) -> SolverResult:
  """Solves ``z = f(z)`` from ``z0`` with the solver named in ``config``.

  Args:
    f: batched per-sample map ``[B, ...] -> [B, ...]``.
    z0: ``[B, ...]`` initial state (zeros or a warm start).
    config: ``SolverConfig``, a solver name (``"anderson"``, ``"iteration"``,
      ``"broyden"``) or a label such as ``"30A"``.
    steps: evaluations of ``f`` (overrides the config).
    tol: relative residual tolerance (overrides the config).

  Returns:
    ``SolverResult(z, residual [B], steps, converged [B])``.

  Examples:
    >>> import jax.numpy as jnp
    >>> f = lambda z: 0.5 * z + 1.0            # fixed point z* = 2
    >>> r = solve(f, jnp.zeros((3, 4)), "anderson", steps=5)
    >>> bool(jnp.allclose(r.z, 2.0, atol=1e-4))
    True
  """
  cfg = as_solver_config(config) if not isinstance(config, SolverConfig) else config
  return _SOLVE[cfg.name](f, z0, config=cfg, steps=steps, tol=tol)


_SOLVE = {"anderson": anderson, "iteration": fixed_point_iteration, "broyden": broyden}
