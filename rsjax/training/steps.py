"""The compiled steps of the trainer: one optimizer step of an objective (with the model's
own loss terms and diagnostics), the per-epoch evaluation, and the watch for a non-finite
loss."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from rsjax.models import AuxLoss, Diagnostic
from rsjax.training.config import make_optimizer

if TYPE_CHECKING:
  from jax.typing import ArrayLike

  from rsjax.engine.step import ApplyFn
  from rsjax.training.config import BatchSigma, TrainConfig
  from rsjax.training.objectives import Objective

__all__ = ["train_step", "eval_step", "evaluate", "first_bad_step", "check_finite_loss"]

#: What a model reports after a train-mode call: ``(aux_loss or None, {name: diagnostic})``
#: (``int`` only to the type checker: ``sum`` of a non-empty list of arrays is an array).
_Reports = tuple[jax.Array | int | None, dict[str, jax.Array]]


@functools.partial(
  jax.jit,
  static_argnames=("graphdef", "eval_fn", "objective", "spec", "steps_per_epoch", "batch_sigma"),
)
def train_step(
  params: nnx.State,
  rest: nnx.State,
  opt_state: optax.OptState,
  x: jax.Array,
  y: jax.Array,
  sigma: ArrayLike,
  key: jax.Array,
  epoch: ArrayLike,
  sigma_state: Any = None,
  idx: jax.Array | None = None,
  sigma_key: jax.Array | None = None,
  *,
  graphdef: nnx.GraphDef,
  eval_fn: ApplyFn,
  objective: Objective,
  spec: TrainConfig,
  steps_per_epoch: int,
  batch_sigma: BatchSigma | None = None,
) -> tuple[nnx.State, nnx.State, optax.OptState, jax.Array, dict, Any]:
  """One optimizer step of ``objective`` on a batch.

  ``x`` is ``[B, *input_shape]``, ``y`` ``[B]`` labels, ``sigma`` a scalar or ``[B]``
  and ``idx`` the ``[B]`` dataset indices of the batch (for ``batch_sigma``).

  With ``batch_sigma`` the batch's per-input sigma comes from it (and its state),
  computed before the objective. Returns the new state, the summed loss, aux and
  the new ``sigma_state``.
  """
  tx = make_optimizer(spec, steps_per_epoch)
  if batch_sigma is not None:
    sigma_state, sigma = batch_sigma(
      sigma_key, sigma_state, eval_fn, nnx.merge_state(params, rest), x, idx, epoch
    )
    sigma = jax.lax.stop_gradient(sigma)

  def loss_fn(p: nnx.State, r: nnx.State) -> tuple[jax.Array, tuple[nnx.State, dict]]:
    last_rest = [r]
    # (model AuxLoss terms, Diagnostic values) of each train-mode call
    reported: list[_Reports] = []

    def apply_fn(p_: nnx.State, x_: jax.Array, *args: Any, method: str | None = None) -> Any:
      # copy=True: fresh NNX variables owned by this (grad) trace, so BatchNorm
      # can update its statistics here; each call starts from the statistics of
      # the previous one, and those of the last call are kept. ``method`` calls
      # another method of the model (e.g. a noise generator, UCAN).
      model = nnx.merge(graphdef, p_, last_rest[0], copy=True)
      out = (model if method is None else getattr(model, method))(x_, *args)
      last_rest[0] = nnx.state(model, nnx.Not(nnx.Param))
      reported.append(_model_reports(model))
      return out

    def eval_apply(p_: nnx.State, x_: jax.Array) -> jax.Array:
      return eval_fn(nnx.merge_state(p_, r), x_)

    loss, aux = objective(key, apply_fn, p, x, y, sigma=sigma, epoch=epoch, eval_fn=eval_apply)
    loss, aux = _add_model_reports(loss, aux, reported)
    return loss, (last_rest[0], aux)

  (loss, (new_rest, aux)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, rest)
  updates, opt_state = tx.update(grads, opt_state, params)
  params = optax.apply_updates(params, updates)
  return params, new_rest, opt_state, loss * x.shape[0], aux, sigma_state


def _model_reports(model: nnx.Module) -> _Reports:
  """``(aux_loss, diagnostics)`` a model set in its last train-mode call.

  ``aux_loss`` is the sum of its ``rsjax.models.AuxLoss`` variables (None if it
  has none); ``diagnostics`` maps the name of each ``rsjax.models.Diagnostic``
  variable to its value.
  """
  losses = jax.tree.leaves(nnx.state(model, AuxLoss))
  diags = {
    "/".join(str(k) for k in path): jnp.asarray(v.get_value(), jnp.float32)
    for path, v in nnx.to_flat_state(nnx.state(model, Diagnostic))
  }
  return (sum(losses) if losses else None), diags


def _add_model_reports(
  loss: jax.Array, aux: dict, reported: list[_Reports]
) -> tuple[jax.Array, dict]:
  """Adds the mean ``AuxLoss`` of the model's calls to ``loss`` and their mean
  diagnostics (and that loss term, as ``aux_loss``) to ``aux["diagnostics"]``."""
  if not reported:
    return loss, aux
  diags = {k: sum(d[k] for _, d in reported) / len(reported) for k in reported[0][1]}
  terms = [a for a, _ in reported if a is not None]
  if terms:
    extra = sum(terms) / len(terms)
    loss = loss + extra
    diags["aux_loss"] = jax.lax.stop_gradient(extra)
  if diags:
    aux = dict(aux, diagnostics=diags)
  return loss, aux


@functools.partial(jax.jit, static_argnames=("apply_fn",))
def eval_step(
  variables: Any,
  x: jax.Array,
  y: jax.Array,
  mask: jax.Array,
  key: jax.Array,
  sigma: ArrayLike,
  *,
  apply_fn: ApplyFn,
) -> tuple[jax.Array, jax.Array]:
  """Numbers of correct clean and noisy (one draw) predictions among the unmasked rows.

  ``x`` is ``[b, *input_shape]``, ``y`` ``[b]`` labels and ``mask`` ``[b]`` booleans.
  """
  noise = sigma * jax.random.normal(key, x.shape, x.dtype)
  clean = jnp.argmax(apply_fn(variables, x), axis=-1) == y
  noisy = jnp.argmax(apply_fn(variables, x + noise), axis=-1) == y
  return jnp.sum(clean & mask), jnp.sum(noisy & mask)


def evaluate(
  eval_fn: Callable[..., tuple[jax.Array, jax.Array]],
  variables: Any,
  x: np.ndarray,
  y: np.ndarray,
  key: jax.Array,
  batch_size: int,
) -> tuple[float, float]:
  """Clean and noisy accuracy of ``x [n, *input_shape]``, ``y [n]`` with ``eval_fn`` (an
  :func:`eval_step` with its ``apply_fn`` and ``sigma`` bound), ``batch_size`` rows a call."""
  n = x.shape[0]
  b = min(batch_size, n)
  clean: int | jax.Array = 0
  noisy: int | jax.Array = 0
  for i, start in enumerate(range(0, n, b)):
    xb, yb = x[start : start + b], y[start : start + b]
    m = xb.shape[0]
    mask = np.arange(b) < m
    if m < b:  # pad to a static shape; padding is masked out
      xb = np.concatenate([xb, np.zeros((b - m, *xb.shape[1:]), xb.dtype)])
      yb = np.concatenate([yb, np.zeros((b - m,), yb.dtype)])
    c, z = eval_fn(variables, xb, yb, mask, jax.random.fold_in(key, i))
    clean, noisy = clean + c, noisy + z
  return float(clean) / n, float(noisy) / n


@jax.jit
def first_bad_step(first_bad: jax.Array, loss: jax.Array, step: ArrayLike) -> jax.Array:
  """``step`` if ``loss`` is the first non-finite one (``first_bad < 0``), else ``first_bad``."""
  return jnp.where((first_bad < 0) & ~jnp.isfinite(loss), jnp.asarray(step, jnp.int32), first_bad)


def check_finite_loss(first_bad: int, epoch: int, steps_per_epoch: int) -> None:
  """Raises ``FloatingPointError`` naming the step where the loss stopped being finite."""
  if first_bad >= 0:
    raise FloatingPointError(
      f"training loss became non-finite (NaN or inf) at step {first_bad + 1} (epoch {epoch + 1}, "
      f"batch {first_bad - epoch * steps_per_epoch + 1} of {steps_per_epoch}); epoch "
      f"{epoch + 1} was not saved. Lower the learning rate or check the data and model"
    )
