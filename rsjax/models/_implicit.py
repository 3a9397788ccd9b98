"""Implicit differentiation through a fixed point, and Jacobian regularization.

Training a DEQ needs ``d z*/d theta`` where ``z* = f(theta, z*)``. By the
implicit function theorem, for a cotangent ``g`` on ``z*``,
``g^T dz*/dtheta = u^T df/dtheta`` with ``u`` the solution of the adjoint fixed
point ``u = g + J^T u`` (``J = df/dz`` at ``z*``). ``fixed_point`` solves the
forward problem without storing the iterations and the adjoint problem with a
batched solver of ``rsjax.models.solve``; memory is that of one evaluation of
``f``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Literal, overload

import jax
import jax.numpy as jnp

from rsjax.models._solvers import SolverConfig, as_solver_config, solve

__all__ = ["implicit_fixed_point", "jacobian_frobenius_sq"]


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 3, 4))
def _fixed_point(f, theta, z0, forward, backward):
  r = solve(lambda z: f(theta, z), z0, forward)
  return r.z, r.residual, r.steps


def _fixed_point_fwd(f, theta, z0, forward, backward):
  r = solve(lambda z: f(theta, z), jax.lax.stop_gradient(z0), forward)
  return (r.z, r.residual, r.steps), (theta, r.z, z0)


def _fixed_point_bwd(f, forward, backward, res, cotangents):
  g = cotangents[0]  # the residual and step count are diagnostics, not differentiated
  theta, z, z0 = res
  _, vjp_z = jax.vjp(lambda zz: f(theta, zz), z)
  # Adjoint fixed point u = g + J^T u, started at g.
  u = solve(lambda u: vjp_z(u)[0] + g, g, backward).z
  _, vjp_theta = jax.vjp(lambda th: f(th, z), theta)
  (g_theta,) = vjp_theta(u)
  return g_theta, jax.tree.map(jnp.zeros_like, z0)


_fixed_point.defvjp(_fixed_point_fwd, _fixed_point_bwd)


@overload
def implicit_fixed_point(
  f: Callable[[Any, jax.Array], jax.Array],
  theta: Any,
  z0: jax.Array,
  *,
  forward: SolverConfig | str = "anderson",
  backward: SolverConfig | str | None = None,
  return_info: Literal[False] = False,
) -> jax.Array: ...


@overload
def implicit_fixed_point(
  f: Callable[[Any, jax.Array], jax.Array],
  theta: Any,
  z0: jax.Array,
  *,
  forward: SolverConfig | str = "anderson",
  backward: SolverConfig | str | None = None,
  return_info: Literal[True],
) -> tuple[jax.Array, jax.Array, jax.Array]: ...


def implicit_fixed_point(
  f: Callable[[Any, jax.Array], jax.Array],
  theta: Any,
  z0: jax.Array,
  *,
  forward: SolverConfig | str = "anderson",
  backward: SolverConfig | str | None = None,
  return_info: bool = False,
) -> jax.Array | tuple[jax.Array, jax.Array, jax.Array]:
  """Differentiable fixed point ``z* = f(theta, z*)`` (implicit gradient).

  Args:
    f: ``f(theta, z) -> z``, batched per sample, ``z [B, ...]``.
    theta: pytree of everything ``f`` is differentiated with respect to
      (parameters, the input injection).
    z0: ``[B, ...]`` initial state; it receives a zero gradient (the fixed point
      does not depend on it).
    forward: solver for ``z = f(theta, z)`` (``SolverConfig`` or name).
    backward: solver for the adjoint ``u = g + J^T u`` (default: ``forward``).
    return_info: also return the forward solve's diagnostics.

  Returns:
    ``[B, ...]`` the forward solver's estimate of ``z*``; its gradient is the
    implicit-function-theorem gradient at that point. With ``return_info``,
    ``(z*, residual [B], steps)``: the relative residual of the forward solve
    and its number of evaluations of ``f`` (not differentiated).
  """
  fwd = as_solver_config(forward)
  bwd = fwd if backward is None else as_solver_config(backward)
  z, residual, steps = _fixed_point(f, theta, z0, fwd, bwd)
  return (z, residual, steps) if return_info else z


def jacobian_frobenius_sq(
  key: jax.Array, f: Callable[[jax.Array], jax.Array], z: jax.Array, *, num_vectors: int = 1
) -> jax.Array:
  """Hutchinson estimate of ``||J_f(z)||_F^2 / D`` per sample (Bai et al. 2021).

  ``E_eps ||eps^T J||^2 = ||J||_F^2`` for ``eps ~ N(0, I)``; dividing by the
  state size ``D`` gives MDEQ's ``jac_loss`` (weighted by ``JAC_LOSS_WEIGHT``).
  ``z`` is treated as a constant (``stop_gradient``); the estimate is
  differentiable with respect to whatever ``f`` closes over.

  Args:
    key: PRNG key for the probe vectors.
    f: batched per-sample map ``[B, ...] -> [B, ...]``.
    z: ``[B, ...]`` point (usually the fixed point).
    num_vectors: number of probe vectors averaged.

  Returns:
    ``[B]`` float32 estimates.
  """
  z = jax.lax.stop_gradient(z)
  _, vjp = jax.vjp(f, z)
  d = z[0].size
  keys = jax.random.split(key, num_vectors)

  def one(k):
    eps = jax.random.normal(k, z.shape, z.dtype)
    (vj,) = vjp(eps)
    return jnp.sum(jnp.square(vj.reshape(z.shape[0], -1)), axis=1)

  total = sum(one(keys[i]) for i in range(num_vectors))
  return (total / (num_vectors * d)).astype(jnp.float32)
