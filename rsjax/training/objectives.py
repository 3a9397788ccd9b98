"""Certified-training objectives: pure losses with ``m`` noise draws per input.

Every objective is a small frozen dataclass holding its hyperparameters (so it
is hashable, a static argument of ``jax.jit``, and written to ``config.json``)
and called as a pure function::

  loss, aux = objective(key, apply_fn, params, x, y, sigma=sigma, epoch=epoch)

* ``key``: a ``jax.random.key``; all noise of the batch derives from it.
* ``apply_fn(params, x) -> logits``: the classifier being trained (train mode).
* ``x``: ``[B, *input_shape]`` clean inputs in [0, 1]; ``y``: ``[B]`` int labels.
* ``sigma``: the noise level, a scalar or ``[B]`` (one per input: data-dependent
  sigma, as DDRS trains).
* ``epoch``: the (0-based, possibly traced) epoch, for warm-ups and strategies
  that start at an epoch.
* ``eval_fn``: optional eval-mode classifier ``eval_fn(params, x) -> logits``
  used for attacks and noise selection (the reference codes run those with
  ``model.eval()``); default ``apply_fn``. Attacks see ``stop_gradient(params)``.

``loss`` is a float32 scalar (differentiate it with respect to ``params``) and
``aux`` a dict of float32 scalars holding at least ``correct``: the number of
correct predictions on the noisy training copies divided by ``m`` (so that
``correct / B`` is the noisy training accuracy).

Batch convention (Salman et al. 2019, Jeong & Shin 2020, Sun et al. 2025): each
of the ``B`` inputs is replicated ``m`` times with independent noise, so one
step sees ``B * m`` noisy images; the reference codes split a loader batch of
``B * m`` into ``m`` chunks of ``B`` inputs, each its own step. Copies are
input-major: rows ``i * m .. i * m + m - 1`` are the copies of input ``i``.

Defaults are the papers' CIFAR-10 values; each docstring says how they carry
over to MNIST. Quantities measured in input-space L2 norm (sigma, attack radii)
keep their value, since certified radii are compared in the same L2 units
whatever the input dimension; per-coordinate steps (Linf) scale with
``1 / sqrt(d)``; epoch counts (warm-ups) scale with the length of training.

The attacks the objectives use (SmoothAdv's PGD, the sphere attack) are in
:mod:`rsjax.training.attacks`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any, ClassVar

import jax
import jax.numpy as jnp
from jax.scipy.special import ndtri, xlogy

from rsjax.stats import check_integral
from rsjax.training.attacks import SphereAttack as SphereAttack
from rsjax.training.attacks import cross_entropy, row_norm, smoothed_pgd, warmup_epsilon

if TYPE_CHECKING:
  from jax.typing import ArrayLike

  from rsjax.engine.step import ApplyFn

__all__ = [
  "Objective",
  "Gaussian",
  "Consistency",
  "SmoothAdv",
  "MACER",
  "SphereAttack",
  "OBJECTIVES",
  "make_objective",
  "replicate",
]


def replicate(
  key: jax.Array, x: jax.Array, y: jax.Array, sigma: ArrayLike, m: int
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """``m`` Gaussian copies of each input (input-major).

  Args:
    key: a ``jax.random.key``.
    x: ``[B, *input_shape]`` inputs.
    y: ``[B]`` labels.
    sigma: scalar or ``[B]`` noise level.
    m: copies per input.

  Returns:
    ``(xr, yr, delta)``: ``xr [B*m, ...]`` the repeated clean inputs, ``yr
    [B*m]`` their labels and ``delta [B*m, ...]`` the noise ``sigma * N(0, I)``.
  """
  if m != 1:
    x, y = jnp.repeat(x, m, axis=0), jnp.repeat(y, m, axis=0)
  sigma = jnp.asarray(sigma, x.dtype)
  if sigma.ndim == 1:  # one sigma per input
    sigma = jnp.repeat(sigma, m).reshape((-1,) + (1,) * (x.ndim - 1))
  return x, y, sigma * jax.random.normal(key, x.shape, x.dtype)


def _correct(logits, y, m: int):
  return jnp.sum(jnp.argmax(logits, axis=-1) == y).astype(jnp.float32) / m


class Objective:
  """Base of the objectives: a pure ``(key, apply_fn, params, x, y, *, sigma,
  epoch=0, eval_fn=None) -> (loss, aux)`` with hyperparameters as fields."""

  name: ClassVar[str] = ""

  #: noise draws per input (``m``).
  num_noise: int = 1

  #: names of the fields that count epochs (checked to be integers >= 0).
  epoch_fields: ClassVar[tuple[str, ...]] = ()

  def __call__(self, key, apply_fn, params, x, y, *, sigma, epoch=0, eval_fn=None):
    raise NotImplementedError

  def to_json(self) -> dict:
    """``{"name": ..., **hyperparameters}`` (nested dataclasses as dicts)."""
    return {"name": self.name, **dataclasses.asdict(self)}

  def __post_init__(self):
    check_integral("num_noise", self.num_noise)
    for name in self.epoch_fields:
      check_integral(name, getattr(self, name), 0)

  def noisy_logits(
    self,
    key: jax.Array,
    apply_fn: ApplyFn,
    params: Any,
    x: jax.Array,
    y: jax.Array,
    sigma: ArrayLike,
  ) -> tuple[jax.Array, jax.Array]:
    """Float32 logits ``[B*m, C]`` of the ``m`` Gaussian copies of each input, and their labels."""
    xr, yr, delta = replicate(key, x, y, sigma, self.num_noise)
    return apply_fn(params, xr + delta).astype(jnp.float32), yr


@dataclasses.dataclass(frozen=True)
class Gaussian(Objective):
  """Gaussian-noise training (Cohen et al. 2019) with ``m`` draws per input.

  ``loss = mean over the B * m copies of CE(f(x + delta), y)``, ``delta ~
  N(0, sigma^2 I)``. ``num_noise = 1`` is Cohen et al.'s recipe (the rsjax
  default, bit-identical to earlier releases); ``num_noise = 4`` is the
  baseline of Sun et al. 2025 ("ACR is a poor metric", m = 4). With
  ``attack`` the noise of each copy is replaced by the adaptive sphere attack
  of Sun et al. (:class:`SphereAttack`) from ``attack.start_epoch`` on.

  Attributes:
    num_noise: m, noise draws per input.
    attack: optional :class:`SphereAttack`.
  """

  name: ClassVar[str] = "gaussian"
  num_noise: int = 1
  attack: SphereAttack | None = None

  def __call__(self, key, apply_fn, params, x, y, *, sigma, epoch=0, eval_fn=None):
    m = self.num_noise
    xr, yr, delta = replicate(key, x, y, sigma, m)
    if self.attack is not None:
      attack_fn = eval_fn or apply_fn
      delta = jax.lax.cond(
        jnp.asarray(epoch) >= self.attack.start_epoch,
        lambda d: self.attack(attack_fn, params, xr, yr, d),
        lambda d: d,
        delta,
      )
    logits = apply_fn(params, xr + delta)
    loss = cross_entropy(logits, yr).mean()
    return loss, {"correct": _correct(logits, yr, m)}


@dataclasses.dataclass(frozen=True)
class Consistency(Objective):
  """Consistency regularization (Jeong & Shin, NeurIPS 2020; ``train_consistency.py``).

  With ``p_i = softmax(f(x + delta_i))`` and ``p_bar`` their mean over the
  ``m`` copies of an input::

    loss = mean_i CE(f(x + delta_i), y)
           + mean_x [ lbd * mean_i KL(p_bar || p_i) + eta * H(p_bar) ]

  Defaults: the paper's CIFAR-10 recipe (m = 2, eta = 0.5, lbd = 10; it uses
  lbd = 20 for some sigma). The terms compare class distributions, not inputs,
  so nothing depends on the input dimension and MNIST keeps these values.

  Attributes:
    num_noise: m (2 in the paper).
    lbd: weight of the consistency (KL) term.
    eta: weight of the entropy term.
  """

  name: ClassVar[str] = "consistency"
  num_noise: int = 2
  lbd: float = 10.0
  eta: float = 0.5

  def __call__(self, key, apply_fn, params, x, y, *, sigma, epoch=0, eval_fn=None):
    m = self.num_noise
    logits, yr = self.noisy_logits(key, apply_fn, params, x, y, sigma)
    xent = cross_entropy(logits, yr).mean()
    logp = jax.nn.log_softmax(logits).reshape(x.shape[0], m, -1)
    avg = jnp.exp(logp).mean(axis=1)  # [B, C]
    kl = (jnp.sum(xlogy(avg, avg), -1)[:, None] - jnp.sum(avg[:, None] * logp, -1)).mean(1)
    ent = -jnp.sum(avg * jnp.log(avg + 1e-10), -1)
    loss = xent + jnp.mean(self.lbd * kl + self.eta * ent)
    return loss, {
      "correct": _correct(logits, yr, m),
      "xent": xent,
      "kl": kl.mean(),
      "entropy": ent.mean(),
    }


@dataclasses.dataclass(frozen=True)
class SmoothAdv(Objective):
  """SmoothAdv (Salman et al., NeurIPS 2019; ``train_pgd.py``, multi-noise PGD).

  An L2 PGD attack on the *soft* smoothed classifier finds ``x'`` with
  ``||x' - x||_2 <= eps`` maximizing ``-log(mean_i softmax(f(x' + delta_i))_y)``
  over the same ``m`` noise draws ``delta_i``; then the loss is the mean
  cross-entropy of ``f(x' + delta_i)``. PGD as in the reference: start at
  ``x' = x``, ``steps`` steps of size ``2 eps / steps`` along the normalized
  gradient, ``x'`` clipped to [0, 1], then projected onto the eps-ball. The
  radius warms up linearly: ``eps_t = min(eps, (epoch + 1) * eps / warmup)``.

  Defaults: CIFAR-10 at sigma = 0.5 in the range the paper searched
  (eps = 1.0, 2 steps, m = 4, warm-up 10 of 150 epochs). For MNIST eps stays
  (an L2 radius in the same units as the certified radius), and ``warmup``
  should keep the paper's fraction of training (1/15 of the epochs).

  Attributes:
    num_noise: m.
    epsilon: attack radius (L2, [0, 1] pixel units).
    steps: PGD steps.
    warmup: epochs over which eps grows linearly to ``epsilon`` (>= 1).
  """

  name: ClassVar[str] = "smoothadv"
  num_noise: int = 4
  epsilon: float = 1.0
  steps: int = 2
  warmup: int = 10

  def __post_init__(self):
    super().__post_init__()
    if not (math.isfinite(self.epsilon) and self.epsilon >= 0):
      raise ValueError(f"epsilon must be >= 0, got {self.epsilon!r}")
    for name in ("steps", "warmup"):
      check_integral(name, getattr(self, name))

  def epsilon_at(self, epoch: ArrayLike) -> jax.Array:
    """The warmed-up radius of a (0-based) epoch."""
    return warmup_epsilon(self.epsilon, self.warmup, epoch)

  def attack(
    self,
    apply_fn: ApplyFn,
    params: Any,
    x: jax.Array,
    y: jax.Array,
    noise: jax.Array,
    eps: ArrayLike,
  ) -> jax.Array:
    """PGD on the soft smoothed classifier; returns ``x' [B, ...]`` with ``||x' - x|| <= eps``.

    ``noise`` is ``[B*m, ...]`` (input-major copies of each input); see
    :func:`rsjax.training.attacks.smoothed_pgd`.
    """
    return smoothed_pgd(
      apply_fn, params, x, y, noise, eps, steps=self.steps, num_noise=self.num_noise
    )

  def __call__(self, key, apply_fn, params, x, y, *, sigma, epoch=0, eval_fn=None):
    m = self.num_noise
    eps = self.epsilon_at(epoch)
    _, yr, noise = replicate(key, x, y, sigma, m)
    adv = self.attack(eval_fn or apply_fn, params, x, y, noise, eps)
    logits = apply_fn(params, jnp.repeat(adv, m, axis=0) + noise)
    loss = cross_entropy(logits, yr).mean()
    return loss, {
      "correct": _correct(logits, yr, m),
      "epsilon": eps,
      "max_perturbation": jnp.max(row_norm(adv - x)),
    }


@dataclasses.dataclass(frozen=True)
class MACER(Objective):
  """MACER (Zhai et al., ICLR 2020; ``macer.py``): maximize the certified radius.

  With the soft smoothed probabilities ``p = mean_i softmax(f(x + delta_i))``
  over ``m`` draws::

    loss = mean_x [ -log(p_y + 1e-10)
                    + lbd * sigma / 2 * (gamma - xi) * 1{correct, finite, xi <= gamma} ]

  where ``xi = Phi^-1(q_1) - Phi^-1(q_2)`` over the two largest entries of
  ``q = mean_i softmax(beta * f(x + delta_i))`` (the hinge on the radius), and
  "correct" means the top entry of ``q`` is ``y``. ``sigma`` is per input
  when the trainer gives one.

  Defaults: MACER's code for CIFAR-10 and MNIST (m = 16, lbd = 12, gamma = 8,
  beta = 16, SGD lr 0.01; the paper lowers lbd for sigma = 1). Measured on
  LeNet / MNIST at sigma = 0.5 with the Gaussian recipe's lr 0.05 (m = 4 and
  16): with lbd = 12 (and 2.4, i.e. lr x lbd kept at MACER's 0.12) training
  dies, from scratch and within ten steps of switching the hinge on after a
  Gaussian-like start: the hinge rewards scaling the logits up, the
  robustness softmax saturates (q_1 rounds to 1, rows the reference drops),
  the NLL's 1e-10 floor leaves the wrong inputs without gradient, and the
  gradient norm goes to 0 at 9% accuracy. ``lbd = 0.5`` with a ``deferred``
  start (the smoothed cross-entropy alone for the first third of training)
  trains; the ACR study uses that, and says so.

  Attributes:
    num_noise: m.
    lbd: weight of the robustness term.
    gamma: hinge of the radius term (in units of sigma * Phi^-1).
    beta: inverse temperature of the robustness softmax.
    deferred: epochs (0-based, before this one) trained with ``lbd = 0``, i.e.
      the cross-entropy of the smoothed soft classifier alone, before the
      radius hinge switches on (0: from the start, as MACER's code).
  """

  name: ClassVar[str] = "macer"
  epoch_fields: ClassVar[tuple[str, ...]] = ("deferred",)
  num_noise: int = 16
  lbd: float = 12.0
  gamma: float = 8.0
  beta: float = 16.0
  deferred: int = 0

  def __call__(self, key, apply_fn, params, x, y, *, sigma, epoch=0, eval_fn=None):
    m = self.num_noise
    b = x.shape[0]
    logits, yr = self.noisy_logits(key, apply_fn, params, x, y, sigma)
    p = jax.nn.softmax(logits).reshape(b, m, -1).mean(1)
    p_y = jnp.take_along_axis(p, y[:, None], axis=1)[:, 0]
    xent = -jnp.log(p_y + 1e-10)
    q = jax.nn.softmax(self.beta * logits).reshape(b, m, -1).mean(1)
    top, idx = jax.lax.top_k(q, 2)
    ok = (top[:, 0] < 1) & (top[:, 1] > 0)  # Phi^-1 finite (the reference drops inf/nan)

    def gap(keep):  # Phi^-1(q_1) - Phi^-1(q_2) where ``keep``, a safe 0.67 elsewhere
      return ndtri(jnp.where(keep, top[:, 0], 0.75)) - ndtri(jnp.where(keep, top[:, 1], 0.25))

    # The reference *drops* the inputs outside the hinge (boolean indexing), so
    # they get no gradient. Masking with ``where`` instead would send 0 * inf =
    # NaN through Phi^-1 of a q_2 that underflows towards 0 (xi far above
    # gamma): decide the hinge without gradient, then evaluate Phi^-1 only on
    # the kept entries (there |xi| <= gamma keeps both terms finite).
    hinge = ok & (idx[:, 0] == y) & (jax.lax.stop_gradient(gap(ok)) <= self.gamma)
    xi = gap(hinge)
    sig = jnp.broadcast_to(jnp.asarray(sigma, jnp.float32), (b,))
    robust = jnp.where(hinge, (self.gamma - xi) * sig / 2, 0.0)
    lbd = jnp.where(jnp.asarray(epoch) >= self.deferred, jnp.float32(self.lbd), jnp.float32(0.0))
    loss = jnp.mean(xent + lbd * robust)
    return loss, {"correct": _correct(logits, yr, m), "xent": xent.mean(), "robust": robust.mean()}


#: Objectives by name (the CLI's ``--objective`` choices).
OBJECTIVES: dict[str, Any] = {cls.name: cls for cls in (Gaussian, Consistency, SmoothAdv, MACER)}


def make_objective(name: str, **hyperparameters: Any) -> Objective:
  """The objective called ``name`` (a key of :data:`OBJECTIVES`) with the given hyperparameters.

  Raises:
    ValueError: unknown name or hyperparameter (one line naming the valid ones).
  """
  if name not in OBJECTIVES:
    raise ValueError(f"unknown objective {name!r}; choose from {', '.join(sorted(OBJECTIVES))}")
  cls = OBJECTIVES[name]
  fields = {f.name for f in dataclasses.fields(cls)}
  unknown = sorted(set(hyperparameters) - fields)
  if unknown:
    raise ValueError(
      f"objective {name!r} has no hyperparameter {', '.join(unknown)}; "
      f"it takes {', '.join(sorted(fields))}"
    )
  return cls(**hyperparameters)
