"""A single-scale convolutional DEQ classifier in Flax NNX, and its pure functions.

Architecture (an MDEQ-style block at one resolution, Bai et al. 2020)::

  x in [0, 1] -> normalize -> stem conv (stride s) + GroupNorm      = u   (injection)
  f(z, u)  = GN3(relu(z + GN2(conv2(relu(GN1(conv1(z)))) + u)))
  z*       = f(z*, u)       (fixed point, solver from z = 0 or a warm start)
  logits   = fc(flatten(relu(GN(conv_s2(z*)))))

Everything is per sample (GroupNorm, no BatchNorm), as the batched solvers
require. ``__call__`` solves with ``solver`` and differentiates implicitly
(``rsjax.models.implicit_fixed_point``), so the module trains like any other NNX
classifier (e.g. with ``rsjax.training.train``). For certification use the pure
functions:

* ``DEQForward``: ``deq_fn(variables, x, z0, solver) -> (logits, SolverResult)``,
  the interface of the SRS sampler (warm starts through ``z0``);
* ``DEQApply``: the standard ``apply_fn(variables, x) -> logits`` (zero
  initialization, a fixed solver and step count) for ``rsjax.certify``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, overload

import jax
import jax.numpy as jnp
from flax import nnx

from rsjax.models._aux import AuxLoss, Diagnostic
from rsjax.models._implicit import implicit_fixed_point, jacobian_frobenius_sq
from rsjax.models._layers import NormalizeArg, image_shape, normalize_layer, normalized
from rsjax.models._solvers import SolverConfig, SolverResult, as_solver_config, solve

__all__ = [
  "DEQCell",
  "DEQModel",
  "DEQClassifier",
  "DEQForward",
  "DEQApply",
  "to_deq_fn",
  "make_apply_fn",
]


def normal_init(std: float):
  """An initializer drawing ``N(0, std^2)`` values."""

  def init(key, shape, dtype=jnp.float32):
    return std * jax.random.normal(key, (math.prod(shape),), dtype).reshape(shape)

  return init


class DEQCell(nnx.Module):
  """The equilibrium map ``f(z, u)`` on ``[b, H, W, C]`` states (MDEQ basic block).

  Args:
    channels: C, channels of the state.
    hidden: channels of the inner convolution (default ``C``).
    groups: GroupNorm groups (must divide ``channels`` and ``hidden``).
    init_std: std of the normal initialization of the convolutions (MDEQ uses
      0.01 with weight normalization; small weights keep ``f`` contractive).
    dtype: optional computation dtype (parameters stay float32).
    rngs: ``nnx.Rngs``.
  """

  def __init__(
    self,
    channels: int,
    *,
    hidden: int | None = None,
    groups: int = 4,
    init_std: float = 0.01,
    dtype=None,
    rngs: nnx.Rngs,
  ):
    hidden = int(hidden or channels)
    for name, c in (("channels", channels), ("hidden", hidden)):
      if c % groups:
        raise ValueError(f"{name}={c} must be a multiple of groups={groups}")
    w = normal_init(init_std)
    kw = dict(dtype=dtype, rngs=rngs)
    self.conv1 = nnx.Conv(channels, hidden, (3, 3), use_bias=False, kernel_init=w, **kw)
    self.gn1 = nnx.GroupNorm(hidden, num_groups=groups, **kw)
    self.conv2 = nnx.Conv(hidden, channels, (3, 3), use_bias=False, kernel_init=w, **kw)
    self.gn2 = nnx.GroupNorm(channels, num_groups=groups, **kw)
    self.gn3 = nnx.GroupNorm(channels, num_groups=groups, **kw)

  def __call__(self, z: jax.Array, u: jax.Array) -> jax.Array:
    """``z, u [b, H, W, C] -> f(z, u) [b, H, W, C]``."""
    y = nnx.relu(self.gn1(self.conv1(z)))
    y = self.gn2(self.conv2(y) + u)
    return self.gn3(nnx.relu(z + y))


class DEQModel(nnx.Module):
  """What every DEQ classifier here shares: a subclass defines ``inject(x) -> u``,
  ``head(z) -> logits``, the equilibrium map ``self.cell(z, u)``, ``input_shape``,
  and calls ``setup_solver`` in its ``__init__``.

  In train mode (``deterministic=False``, as after construction or in
  ``rsjax.training.train``) ``__call__`` records the forward solve's mean
  relative residual and step count (``Diagnostic`` variables, logged per epoch
  by the trainer) and, with ``jac_weight > 0``, the Jacobian regularizer
  ``jac_weight * mean ||J_f(z*)||_F^2 / D`` (an ``AuxLoss`` the trainer adds to
  the loss; one Hutchinson probe per call, Bai et al. 2021).
  """

  def setup_input(
    self, input_shape: Sequence[int], num_classes: int, normalize: NormalizeArg
  ) -> tuple[int, int, int]:
    """Validates and stores ``input_shape``, ``num_classes`` and the normalization layer."""
    self.input_shape = shape = image_shape(input_shape, type(self).__name__)
    self.num_classes = int(num_classes)
    self.normalize = normalize_layer(normalize, shape[-1])
    return shape

  def normalized(self, x: jax.Array) -> jax.Array:
    """Checks ``x [b, H, W, C_in]`` and applies the normalization layer."""
    if x.ndim != 4 or tuple(x.shape[1:]) != self.input_shape:
      raise ValueError(
        f"x must have shape [b, {', '.join(map(str, self.input_shape))}], got {x.shape}"
      )
    return normalized(self, x)

  def setup_solver(
    self,
    solver: SolverConfig | str,
    steps: int | None,
    backward: SolverConfig | str | None,
    jac_weight: float,
    rngs: nnx.Rngs,
  ) -> None:
    """Training solver, adjoint solver, Jacobian weight and the train-mode variables."""
    fwd = as_solver_config(solver, steps if isinstance(solver, str) else None)
    self.solver = fwd
    self.backward = fwd if backward is None else as_solver_config(backward)
    if not jac_weight >= 0:
      raise ValueError(f"jac_weight must be >= 0, got {jac_weight!r}")
    self.jac_weight = float(jac_weight)
    self.deterministic = False
    self.solver_residual = Diagnostic(jnp.float32(0.0))
    self.solver_steps = Diagnostic(jnp.float32(0.0))
    if self.jac_weight > 0:
      self.jacobian = Diagnostic(jnp.float32(0.0))
      self.jacobian_loss_term = AuxLoss(jnp.float32(0.0))
      self.jacobian_key = nnx.Rngs(jacobian=rngs.params())

  def _f(self):
    graphdef, state = nnx.split(self.cell)

    def f(theta, z):
      cell_state, u = theta
      return nnx.merge(graphdef, cell_state)(z, u)

    return f, state

  def _equilibrium(self, x: jax.Array):
    """Implicitly differentiated fixed point ``z*`` from zeros, ``z -> f(z, u)``, and the
    forward solve's residual ``[b]`` and steps."""
    u = self.inject(x)
    f, state = self._f()
    z, residual, steps = implicit_fixed_point(
      f,
      (state, u),
      jnp.zeros_like(u),
      forward=self.solver,
      backward=self.backward,
      return_info=True,
    )
    return z, lambda zz: f((state, u), zz), residual, steps

  # -- forward passes ---------------------------------------------------------
  def __call__(self, x: jax.Array) -> jax.Array:
    """Logits with the implicit gradient (training): ``[b, H, W, C_in] -> [b, K]``.

    In train mode it also sets the ``Diagnostic`` and ``AuxLoss`` variables.
    """
    z, f_u, residual, steps = self._equilibrium(x)
    if not self.deterministic:
      self.solver_residual.set_value(jnp.mean(residual))
      self.solver_steps.set_value(steps.astype(jnp.float32))
      if self.jac_weight > 0:
        jac = jnp.mean(jacobian_frobenius_sq(self.jacobian_key.jacobian(), f_u, z))
        self.jacobian.set_value(jax.lax.stop_gradient(jac))
        self.jacobian_loss_term.set_value(self.jac_weight * jac)
    return self.head(z)

  def forward(
    self,
    x: jax.Array,
    *,
    solver: SolverConfig | str | None = None,
    steps: int | None = None,
    z0: jax.Array | None = None,
  ) -> tuple[jax.Array, SolverResult]:
    """Forward solve without implicit differentiation (certification).

    Args:
      x: ``[b, H, W, C_in]`` in [0, 1].
      solver: ``SolverConfig`` or name (default: the training solver).
      steps: overrides the solver's steps.
      z0: ``[b, h, w, C]`` initial state (default zeros): a warm start.

    Returns:
      ``(logits [b, K], SolverResult)``; ``SolverResult.z`` is the final state.
    """
    cfg = as_solver_config(self.solver if solver is None else solver, steps)
    u = self.inject(x)
    f, state = self._f()
    z0 = jnp.zeros_like(u) if z0 is None else z0.astype(u.dtype)
    res = solve(lambda z: f((state, u), z), z0, cfg)
    return self.head(res.z), res

  def jacobian_loss(
    self, x: jax.Array, key: jax.Array, *, num_vectors: int = 1
  ) -> tuple[jax.Array, jax.Array]:
    """Logits (implicit gradient) and the Hutchinson ``||J_f(z*)||_F^2 / D`` ``[b]``.

    MDEQ adds ``JAC_LOSS_WEIGHT * mean(jac)`` to the loss (Bai et al. 2021).
    """
    z, f_u, _, _ = self._equilibrium(x)
    jac = jacobian_frobenius_sq(key, f_u, z, num_vectors=num_vectors)
    return self.head(z), jac

  def state_shape(self, batch: int = 1) -> tuple[int, ...]:
    """Shape of the equilibrium state for a batch of ``batch`` inputs."""
    return jax.eval_shape(lambda: self.inject(jnp.zeros((batch, *self.input_shape)))).shape


class DEQClassifier(DEQModel):
  """Single-scale convolutional DEQ for MNIST/CIFAR-sized NHWC images in [0, 1].

  Args:
    input_shape: ``(H, W, C_in)``, e.g. ``(28, 28, 1)``.
    num_classes: number of logits.
    channels: channels of the equilibrium state.
    hidden: inner channels of the cell (default ``channels``).
    groups: GroupNorm groups.
    stem_stride: stride of the stem convolution (state is ``H/s x W/s``).
    normalize: ``None``, a dataset name (``"mnist"``, ``"cifar10"``) or
      ``(mean, std)``; applied first, so noise is added in [0, 1] pixel scale.
    solver: forward solver of ``__call__`` (training): ``SolverConfig`` or name.
    steps: steps of ``solver`` when it is given by name.
    backward: solver of the adjoint fixed point in training (default: ``solver``).
    init_std: std of the cell's convolution weights at initialization.
    jac_weight: weight of the Jacobian regularizer added to the training loss
      by ``rsjax.training.train`` (0: none; MDEQ uses 0.4 to 2).
    dtype: optional computation dtype (parameters stay float32); the
      signature matches ``rsjax.models.create_model``'s constructors.
    rngs: ``nnx.Rngs`` or an int seed.
  """

  def __init__(
    self,
    *,
    input_shape: Sequence[int] = (28, 28, 1),
    num_classes: int = 10,
    channels: int = 16,
    hidden: int | None = None,
    groups: int = 4,
    stem_stride: int = 2,
    normalize="mnist",
    solver: SolverConfig | str = "anderson",
    steps: int = 12,
    backward: SolverConfig | str | None = None,
    init_std: float = 0.01,
    jac_weight: float = 0.0,
    dtype=None,
    rngs: nnx.Rngs | int = 0,
  ):
    rngs = nnx.Rngs(rngs) if isinstance(rngs, int) else rngs
    shape = self.setup_input(input_shape, num_classes, normalize)
    if channels % groups:
      raise ValueError(f"channels={channels} must be a multiple of groups={groups}")
    kw = dict(dtype=dtype, rngs=rngs)
    self.stem = nnx.Conv(shape[-1], channels, (3, 3), strides=stem_stride, use_bias=False, **kw)
    self.stem_gn = nnx.GroupNorm(channels, num_groups=groups, **kw)
    self.cell = DEQCell(channels, hidden=hidden, groups=groups, init_std=init_std, **kw)
    self.head_conv = nnx.Conv(channels, 2 * channels, (3, 3), strides=2, use_bias=False, **kw)
    self.head_gn = nnx.GroupNorm(2 * channels, num_groups=groups, **kw)
    h = math.ceil(math.ceil(shape[0] / stem_stride) / 2)  # two stride-2 "same" convolutions
    w = math.ceil(math.ceil(shape[1] / stem_stride) / 2)
    self.fc = nnx.Linear(h * w * 2 * channels, self.num_classes, **kw)
    self.setup_solver(solver, steps, backward, jac_weight, rngs)

  # -- pieces ---------------------------------------------------------------
  def inject(self, x: jax.Array) -> jax.Array:
    """``x [b, H, W, C_in]`` in [0, 1] -> injection ``u [b, h, w, C]``."""
    x = self.normalized(x)
    return self.stem_gn(self.stem(x))

  def head(self, z: jax.Array) -> jax.Array:
    """Fixed point ``z [b, h, w, C]`` -> logits ``[b, num_classes]``."""
    y = nnx.relu(self.head_gn(self.head_conv(z)))
    return self.fc(y.reshape(y.shape[0], -1))


@dataclasses.dataclass(frozen=True)
class DEQForward:
  """Pure ``deq_fn(variables, x, z0, solver) -> (logits, SolverResult)`` of a DEQ module.

  ``z0=None`` starts from zeros. Hashable (holds the graph definition), so it
  can be a static argument of ``jax.jit``. Any module with a
  ``forward(x, *, solver, z0)`` method like ``DEQClassifier.forward`` works.
  """

  graphdef: Any

  def __call__(self, variables, x: jax.Array, z0: jax.Array | None, solver: SolverConfig):
    model = nnx.merge(self.graphdef, variables, copy=True)
    return model.forward(x, solver=solver, z0=z0)


@dataclasses.dataclass(frozen=True)
class DEQApply:
  """Standard pure ``apply_fn(variables, x) -> logits``: zero init, fixed solver.

  This is the base classifier certified by standard RS (``rsjax.certify``) and
  by SRS's check samples: the DEQ "solved from scratch with ``solver``".
  """

  deq_fn: Any
  solver: SolverConfig

  def __call__(self, variables, x: jax.Array) -> jax.Array:
    return self.deq_fn(variables, x, None, self.solver)[0]


def to_deq_fn(model: nnx.Module) -> tuple[DEQForward, nnx.State]:
  """``(deq_fn, variables)`` of a DEQ module (see ``DEQForward``)."""
  graphdef, variables = nnx.split(model)
  return DEQForward(graphdef), variables


@overload
def make_apply_fn(
  model_or_fn: nnx.Module,
  *,
  solver: SolverConfig | str = "anderson",
  steps: int | None = 30,
) -> tuple[DEQApply, nnx.State]: ...


@overload
def make_apply_fn(
  model_or_fn: DEQForward,
  *,
  solver: SolverConfig | str = "anderson",
  steps: int | None = 30,
) -> DEQApply: ...


def make_apply_fn(
  model_or_fn: nnx.Module | DEQForward,
  *,
  solver: SolverConfig | str = "anderson",
  steps: int | None = 30,
) -> tuple[DEQApply, nnx.State] | DEQApply:
  """Standard ``apply_fn(variables, x) -> logits`` of a DEQ: zero init, ``steps`` steps.

  Args:
    model_or_fn: a DEQ NNX module, or a ``deq_fn`` (then variables are not returned).
    solver: solver name or ``SolverConfig``.
    steps: solver steps (overrides the config's); e.g. 30 for "30A".

  Returns:
    ``(apply_fn, variables)`` for a module; ``apply_fn`` for a ``deq_fn``.
  """
  cfg = as_solver_config(solver, steps)
  if isinstance(model_or_fn, nnx.Module):
    deq_fn, variables = to_deq_fn(model_or_fn)
    return DEQApply(deq_fn, cfg), variables
  return DEQApply(model_or_fn, cfg)
