"""Training denoisers: DnCNN with the MSE or the stability objective (Salman et al. 2020), and a
DDPM noise model (Ho et al. 2020) for one-step diffusion denoising.

Objectives, for a clean batch ``x`` in [0, 1] and noise ``delta ~ N(0, sigma^2 I)``:

* ``"mse"``: ``mean |D(x + delta) - x|^2``;
* ``"stability"``: ``CE(f(D(x + delta)), argmax f(x))`` against a frozen classifier ``f``
  (Salman et al.'s "Stab"; start from an MSE-trained denoiser for "Stab+MSE");
* ``"ddpm"``: DDPM's noise-prediction loss (:func:`rsjax.models.denoise.diffusion.ddpm_loss`); the
  model is then used through :func:`rsjax.models.denoise.diffusion.one_step_denoiser`.

Adam (Salman et al.: lr 1e-3), one jitted step per batch. Randomness: the shuffle of epoch
``e`` from ``fold_in(fold_in(key, 0), e)``, the noise of step ``s`` from
``fold_in(fold_in(key, 1), s)``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.typing import ArrayLike

from rsjax.models.denoise import diffusion
from rsjax.stats import check_integral

__all__ = ["OBJECTIVES", "DenoiserTraining", "train_denoiser"]

OBJECTIVES = ("mse", "stability", "ddpm")


@dataclasses.dataclass(frozen=True)
class DenoiserTraining:
  """Settings of :func:`train_denoiser`.

  Attributes:
    objective: ``"mse"``, ``"stability"`` or ``"ddpm"``.
    sigma: training noise level in [0, 1] units (mse, stability).
    epochs: passes over the training set.
    batch_size: images per step.
    lr: Adam learning rate.
    t_max: ddpm: draw timesteps from ``[0, t_max)`` (None: the whole schedule).
  """

  objective: str = "mse"
  sigma: float = 0.25
  epochs: int = 10
  batch_size: int = 64
  lr: float = 1e-3
  t_max: int | None = None

  def __post_init__(self):
    if self.objective not in OBJECTIVES:
      raise ValueError(f"objective must be one of {OBJECTIVES}, got {self.objective!r}")
    if self.objective != "ddpm" and not self.sigma > 0:
      raise ValueError(f"sigma must be > 0, got {self.sigma!r}")
    for name in ("epochs", "batch_size"):
      check_integral(name, getattr(self, name))
    if not self.lr > 0:
      raise ValueError(f"lr must be > 0, got {self.lr!r}")


def _loss(objective, sigma, classifier_fn, alphas_cumprod, t_max):
  """``loss(model, classifier_params, key, x) -> scalar`` of the objective."""

  def loss(model, classifier_params, key, x):
    if objective == "ddpm":
      return diffusion.ddpm_loss(
        key, lambda m, xt, t: m(xt, t), model, x, alphas_cumprod=alphas_cumprod, t_max=t_max
      )
    y = x + sigma * jax.random.normal(key, x.shape, x.dtype)
    out = model(y)
    if objective == "mse":
      return jnp.mean((out - x) ** 2)
    target = jnp.argmax(classifier_fn(classifier_params, x), axis=-1)
    logits = classifier_fn(classifier_params, out)
    return optax.softmax_cross_entropy_with_integer_labels(logits, target).mean()

  return loss


def train_denoiser(
  key: jax.Array | int,
  model: nnx.Module,
  train_x: np.ndarray,
  config: DenoiserTraining,
  *,
  classifier: tuple[Callable, Any] | None = None,
  alphas_cumprod: ArrayLike | None = None,
  log: Callable[[str], None] | None = print,
) -> list[dict]:
  """Trains ``model`` in place on clean images.

  Args:
    key: ``jax.random.key`` or int seed.
    model: an NNX denoiser ``model(y) -> x`` (mse, stability) or noise model
      ``model(x_t, t) -> eps`` (ddpm); in train mode.
    train_x: ``[n, H, W, C]`` clean training images in [0, 1].
    config: the settings.
    classifier: ``(apply_fn, params)`` of the frozen classifier (stability only).
    alphas_cumprod: the diffusion schedule (ddpm; default ``linear_schedule()``).
    log: called with one line per epoch (None: silent).

  Returns:
    One dict per epoch: ``epoch``, ``loss`` (mean over its steps), ``seconds``.
  """
  key = jax.random.key(key) if isinstance(key, int) else key
  x_all = np.asarray(train_x, np.float32)
  if x_all.ndim != 4:
    raise ValueError(f"train_x must be [n, H, W, C] images, got shape {x_all.shape}")
  if config.objective == "stability" and classifier is None:
    raise ValueError("the stability objective needs the frozen classifier (classifier=...)")
  classifier_fn, classifier_params = classifier if classifier is not None else (None, None)
  if config.objective == "ddpm" and alphas_cumprod is None:
    alphas_cumprod = diffusion.linear_schedule()
  if config.t_max is not None and alphas_cumprod is not None and config.t_max > len(alphas_cumprod):
    raise ValueError(f"t_max {config.t_max} exceeds the schedule's {len(alphas_cumprod)} steps")
  loss_fn = _loss(
    config.objective,
    config.sigma,
    classifier_fn,
    None if alphas_cumprod is None else np.asarray(alphas_cumprod),
    config.t_max,
  )
  optimizer = nnx.Optimizer(model, optax.adam(config.lr), wrt=nnx.Param)

  @nnx.jit
  def step(model, optimizer, classifier_params, key, x):
    value, grads = nnx.value_and_grad(loss_fn)(model, classifier_params, key, x)
    optimizer.update(model, grads)
    return value

  n = len(x_all)
  steps_per_epoch = max(1, n // config.batch_size)
  history, global_step = [], 0
  for epoch in range(config.epochs):
    t0 = time.perf_counter()
    order = np.asarray(
      jax.random.permutation(jax.random.fold_in(jax.random.fold_in(key, 0), epoch), n)
    )
    losses = []
    for s in range(steps_per_epoch):
      batch = x_all[order[s * config.batch_size : (s + 1) * config.batch_size]]
      k = jax.random.fold_in(jax.random.fold_in(key, 1), global_step)
      losses.append(step(model, optimizer, classifier_params, k, jnp.asarray(batch)))
      global_step += 1
    loss = float(np.mean(jax.device_get(losses)))
    if not np.isfinite(loss):
      raise FloatingPointError(f"denoiser training diverged at epoch {epoch + 1} (loss {loss})")
    history.append({"epoch": epoch + 1, "loss": loss, "seconds": time.perf_counter() - t0})
    if log is not None:
      log(
        f"epoch {epoch + 1}/{config.epochs}: {config.objective} loss {loss:.5f} "
        f"({history[-1]['seconds']:.1f}s)"
      )
  return history
