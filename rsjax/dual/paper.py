"""The sigma estimator trained the paper's way (Sun, Mao and Vechev, ICLR 2026), beside the
"confident" targets of :mod:`rsjax.dual.training`, and one classifier for every sigma.

The paper's recipe, as read second-hand (its summaries and a reading of its code; the
temperature of the soft labels is ours, the paper's could not be read):

* **soft labels** (:func:`soft_targets`): the classifier's estimated radius at each
  candidate sigma, ``sigmas[k] * Phi^-1(p_k)`` from ``draws`` noisy copies (100 in the
  paper), turned into a distribution over the sigmas by a softmax at ``temperature``;
* a **consistency term** (:func:`estimator_loss`): ``m`` noise copies of each input (2), the
  KL of each copy's prediction from their mean (weight ``lbd``, 40) and the mean's entropy
  (weight ``eta``, 0.5), as Jeong and Shin's consistency regularization: it makes the
  smoothed vote more unanimous, so the estimator's own radius ``R_g`` grows;
* **class rebalancing** (:func:`rebalance_weights`): each input weighted by the inverse
  frequency of its best sigma (the argmax of its soft label), mean weight 1;
* AdamW (:func:`train_estimator`), the estimator smoothed at ``sigma_g`` at least the
  largest candidate (:func:`check_sigma_g`);
* one classifier fine-tuned for all sigmas (:class:`CandidateSigma`: each training input's
  noise level drawn from the candidates at every step), the experts an option.

None of this touches the certificate: the estimator is still a fixed classifier smoothed at
``sigma_g`` and certified by ``rsjax.dual.certify`` as before.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.scipy.special import xlogy
from scipy import special

from rsjax.training.config import BatchSigma

if TYPE_CHECKING:
  from rsjax.training.job import TrainJob

__all__ = [
  "TARGETS",
  "CandidateSigma",
  "EstimatorRecipe",
  "check_sigma_g",
  "estimator_loss",
  "hard_soft_targets",
  "rebalance_weights",
  "soft_targets",
  "train_estimator",
  "train_job",
]

#: The estimator's target forms: the paper's soft labels, or one-hot "confident" targets.
TARGETS = ("soft", "hard")


def estimated_radii(p: np.ndarray, sigmas: Sequence[float], *, draws: int) -> np.ndarray:
  """``[n, K]``: ``sigmas[k] * Phi^-1(p_k)`` of each input, ``p`` (``[K, n]`` hit shares of
  ``draws`` copies) clipped to ``[1 / (2 draws), 1 - 1 / (2 draws)]`` (negative where the
  classifier is mostly wrong)."""
  lo = 0.5 / draws
  q = np.clip(np.asarray(p, np.float64), lo, 1.0 - lo)
  return (np.asarray(sigmas, np.float64)[:, None] * special.ndtri(q)).T


def soft_targets(
  p: np.ndarray, sigmas: Sequence[float], *, draws: int, temperature: float = 0.25
) -> np.ndarray:
  """``[n, K]`` soft labels: a softmax over the estimated radii (:func:`estimated_radii`) at
  ``temperature`` (in radius units; smaller is harder).

  Args:
    p: ``[K, n]`` the classifier's hit share at each sigma (``rsjax.dual.training.expert_hits``).
    sigmas: ``K`` candidate sigmas.
    draws: the noisy copies behind each share.
    temperature: > 0.
  """
  if not (math.isfinite(temperature) and temperature > 0):
    raise ValueError(f"temperature must be > 0, got {temperature!r}")
  return special.softmax(estimated_radii(p, sigmas, draws=draws) / temperature, axis=1)


def hard_soft_targets(targets: np.ndarray, k: int) -> np.ndarray:
  """``[n, K]`` one-hot rows of int ``targets`` (``[n]``): today's hard targets in the form
  :func:`train_estimator` takes."""
  return np.eye(k)[np.asarray(targets, np.int64)]


def rebalance_weights(soft: np.ndarray) -> np.ndarray:
  """``[n]`` weights: ``1 / frequency`` of each input's best sigma (the argmax of its row of
  ``soft``, ``[n, K]``) over the inputs, scaled to mean 1."""
  best = np.argmax(soft, axis=1)
  freq = np.bincount(best, minlength=soft.shape[1]) / len(best)
  w = 1.0 / freq[best]
  return w / w.mean()


def check_sigma_g(sigma_g: float, sigmas: Sequence[float]) -> None:
  """The paper smooths the estimator at ``sigma_g >= max(sigmas)``: raises otherwise."""
  if not sigma_g >= max(sigmas):
    raise ValueError(f"sigma_g must be >= the largest candidate {max(sigmas)}, got {sigma_g}")


@dataclasses.dataclass(frozen=True)
class EstimatorRecipe:
  """How :func:`train_estimator` trains (the paper's values where known).

  Attributes:
    epochs: passes over the inputs (90 in the paper).
    batch_size: inputs per step (each seen ``num_noise`` times).
    lr: AdamW's learning rate (cosine decay to 0).
    weight_decay: AdamW's decoupled decay.
    num_noise: noise copies per input (2).
    lbd: weight of the KL term (40); 0 drops the consistency term with ``eta``.
    eta: weight of the entropy term (0.5).
    consistency: add the KL and entropy terms.
    rebalance: weight each input by :func:`rebalance_weights`.
  """

  epochs: int = 20
  batch_size: int = 128
  lr: float = 1e-3
  weight_decay: float = 1e-4
  num_noise: int = 2
  lbd: float = 40.0
  eta: float = 0.5
  consistency: bool = True
  rebalance: bool = True

  def __post_init__(self):
    for name in ("epochs", "batch_size", "num_noise"):
      v = getattr(self, name)
      if isinstance(v, bool) or int(v) != v or v < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    for name in ("lr", "weight_decay", "lbd", "eta"):
      v = getattr(self, name)
      if not (math.isfinite(v) and v >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")


def estimator_loss(
  logits: jax.Array,
  soft: jax.Array,
  weights: jax.Array,
  *,
  lbd: float,
  eta: float,
  consistency: bool,
) -> tuple[jax.Array, dict]:
  """The estimator's loss on ``m`` noisy copies of each of ``B`` inputs.

  ``loss = mean_b w_b [mean_i CE(soft_b, f(x_b + d_i)) + lbd * mean_i KL(p_bar || p_i)
  + eta * H(p_bar)]`` (the last two only with ``consistency``), ``p_i`` the softmax of copy
  ``i``, ``p_bar`` their mean.

  Args:
    logits: ``[B, m, K]``.
    soft: ``[B, K]`` target distributions.
    weights: ``[B]`` per-input weights.
    lbd: KL weight.
    eta: entropy weight.
    consistency: whether to add the KL and entropy terms.

  Returns:
    ``(loss, aux)``: a scalar and ``{"xent", "kl", "entropy"}`` (their weighted means).
  """
  logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
  xent = -jnp.sum(soft[:, None] * logp, axis=-1).mean(axis=1)  # [B]
  avg = jnp.exp(logp).mean(axis=1)  # [B, K]
  kl = (jnp.sum(xlogy(avg, avg), -1)[:, None] - jnp.sum(avg[:, None] * logp, -1)).mean(1)
  ent = -jnp.sum(xlogy(avg, avg), -1)
  per = xent + (lbd * kl + eta * ent if consistency else 0.0)
  w = weights / jnp.sum(weights)
  return jnp.sum(w * per), {"xent": jnp.sum(w * xent), "kl": jnp.sum(w * kl),
                            "entropy": jnp.sum(w * ent)}  # fmt: skip


def train_estimator(
  key: jax.Array,
  model: Any,
  x: np.ndarray,
  soft: np.ndarray,
  *,
  sigma: float,
  recipe: EstimatorRecipe,
) -> tuple[Any, list[dict]]:
  """The estimator ``model`` trained in place on soft targets at noise ``sigma`` (AdamW,
  cosine schedule; the consistency and rebalancing of ``recipe``).

  Args:
    key: the shuffling and noise key.
    model: an NNX classifier over the ``K`` sigmas (changed in place and returned).
    x: ``[n, *input_shape]`` inputs in [0, 1].
    soft: ``[n, K]`` targets (:func:`soft_targets` or :func:`hard_soft_targets`).
    sigma: the estimator's noise, sigma_g.
    recipe: the schedule and terms.

  Returns:
    ``(model, history)``: one dict per epoch (``loss``, ``xent``, ``kl``, ``entropy``,
    ``agree``: the share of copies whose argmax is the target's).
  """
  from flax import nnx

  from rsjax import models

  if soft.shape[0] != len(x):
    raise ValueError(f"soft has {soft.shape[0]} rows for {len(x)} inputs")
  n, m, bs = len(x), recipe.num_noise, recipe.batch_size
  weights = rebalance_weights(soft) if recipe.rebalance else np.ones(n)
  steps = max(1, math.ceil(n / bs)) * recipe.epochs
  tx = optax.adamw(optax.cosine_decay_schedule(recipe.lr, steps), weight_decay=recipe.weight_decay)
  train_fn, params, rest = models.to_train_fn(model)
  opt_state = tx.init(params)

  @jax.jit
  def step(params, rest, opt_state, key, xb, sb, wb):
    def loss_fn(p):
      noisy = xb[:, None] + sigma * jax.random.normal(key, (xb.shape[0], m, *xb.shape[1:]))
      logits, new_rest = train_fn(p, rest, noisy.reshape(-1, *xb.shape[1:]))
      logits = logits.reshape(xb.shape[0], m, -1)
      loss, aux = estimator_loss(logits, sb, wb, lbd=recipe.lbd, eta=recipe.eta,
                                 consistency=recipe.consistency)  # fmt: skip
      agree = jnp.mean(jnp.argmax(logits, -1) == jnp.argmax(sb, -1)[:, None])
      return loss, (new_rest, aux | {"agree": agree})

    (loss, (rest, aux)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), rest, opt_state, aux | {"loss": loss}

  history = []
  for epoch in range(recipe.epochs):
    order = np.asarray(jax.random.permutation(jax.random.fold_in(key, 2 * epoch), n))
    sums: dict[str, float] = {}
    for b, s in enumerate(range(0, n, bs)):
      idx = order[s : s + bs]
      k = jax.random.fold_in(jax.random.fold_in(key, 2 * epoch + 1), b)
      params, rest, opt_state, aux = step(params, rest, opt_state, k,
                                          jnp.asarray(x[idx], jnp.float32),
                                          jnp.asarray(soft[idx], jnp.float32),
                                          jnp.asarray(weights[idx], jnp.float32))  # fmt: skip
      for name, v in aux.items():
        sums[name] = sums.get(name, 0.0) + float(v) * len(idx) / n
    history.append({"epoch": epoch + 1, **sums})
  nnx.update(model, params, rest)
  return model, history


@dataclasses.dataclass(frozen=True)
class CandidateSigma(BatchSigma):
  """One classifier for every candidate sigma (a :class:`rsjax.training.BatchSigma`): at
  each step each training input's noise level is drawn uniformly from ``sigmas``.

  Attributes:
    sigmas: the candidate sigmas, each > 0.
  """

  sigmas: tuple[float, ...]

  def __post_init__(self):
    s = tuple(float(v) for v in self.sigmas)
    if len(s) < 1 or not all(math.isfinite(v) and v > 0 for v in s):
      raise ValueError(f"sigmas must be one or more numbers > 0, got {self.sigmas!r}")
    object.__setattr__(self, "sigmas", s)

  def init(self, n: int) -> jax.Array:
    """No state to keep (a scalar placeholder)."""
    return jnp.zeros((), jnp.float32)

  def __call__(self, key, state, eval_fn, variables, x, idx, epoch):
    """``(state, sigma [B])``: one candidate per input, uniformly."""
    pick = jax.random.randint(key, (x.shape[0],), 0, len(self.sigmas))
    return state, jnp.asarray(self.sigmas, jnp.float32)[pick]

  def to_json(self) -> dict:
    return {"name": "candidate_sigma", "sigmas": list(self.sigmas)}


def train_job(
  job: TrainJob,
  soft: np.ndarray,
  sigmas: Sequence[float],
  model: Any,
  *,
  target: str,
  temperature: float,
  consistency: float,
  rebalance: bool,
) -> str:
  """The paper's training of the estimator ``model`` on the targets ``soft`` (``[n, K]``,
  :func:`soft_targets` or one-hot rows), the consistency term at KL weight ``consistency``
  (none at 0), rebalancing; AdamW at 1e-3 for the job's epochs; saved in the job's workdir;
  the closing line (``rsjax train --method dual`` with ``--dual-target soft``,
  ``--dual-consistency`` or ``--dual-rebalance``; ``target``, the rule behind ``soft``, and
  ``temperature`` are recorded)."""
  from rsjax import models

  if not math.isfinite(consistency) or consistency < 0:
    raise ValueError(f"--dual-consistency must be a number >= 0, got {consistency}")
  check_sigma_g(job.config.sigma, sigmas)
  recipe = EstimatorRecipe(epochs=job.config.epochs, batch_size=job.config.batch_size,
                           lbd=consistency, consistency=consistency > 0,
                           rebalance=rebalance)  # fmt: skip
  model, history = train_estimator(job.key, model, job.train_data[0], soft,
                                   sigma=job.config.sigma, recipe=recipe)  # fmt: skip
  config = {**job.model_config, "num_classes": len(sigmas), "dual_sigmas": list(sigmas),
            "dual_target": target, "sigma": job.config.sigma,
            "dual_recipe": dataclasses.asdict(recipe) | {"temperature": temperature}}  # fmt: skip
  models.save_model(job.workdir, model, config)
  best = np.argmax(soft, axis=1)
  share = ", ".join(f"sigma {s}: {np.mean(best == k):.2f}" for k, s in enumerate(sigmas))
  return (
    f"trained {job.model_config['model']} as the dual sigma estimator the paper's way at "
    f"sigma={job.config.sigma} (best sigma of the targets {share}): epoch {history[-1]['epoch']}, "
    f"agreement with the targets {history[-1]['agree']:.4f}; saved in {job.workdir}"
  )
