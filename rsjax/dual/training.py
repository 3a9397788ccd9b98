"""``rsjax train --method dual``: the sigma estimator of dual randomized smoothing, trained
on targets the experts give (the routing form: experts trained at their sigmas elsewhere,
not retrained).

Each expert ``k`` is run on ``draws`` noisy copies ``x + N(0, sigmas[k]^2 I)`` of a training
input ``(x, y)``; ``p_k`` is the share it classifies as ``y``. The target is then, by
``rule``:

* ``"confident"`` (the default): the largest sigma whose expert is right on at least a share
  ``tau`` of its draws, where no expert is, the one with the largest ``p_k`` (the smaller
  sigma on ties). With ``n`` samples at certification a Cohen radius is at most
  ``sigmas[k] * Phi^-1(alpha^(1/n))``, so an expert that is right on (nearly) every draw
  certifies more than any smaller sigma can; this target sends each input to the
  largest sigma that still serves it, and its classes are ordered (robust inputs, large
  sigma), which a smoothed estimator can learn with confidence.
* ``"radius"``: the sigma maximizing the estimated radius ``sigmas[k] * Phi^-1(p_k)`` (``p_k``
  clipped to ``1 - 1 / (2 draws)``); where no expert has ``p_k > 1/2``, the smallest sigma.
  With few draws the clip makes it favour large sigmas whose experts are only moderately
  right (issue 57's first run: 84% sigma 0.5, and an estimator that chose it everywhere).

The estimator is then trained as any Gaussian-noise classifier over these ``K`` classes, at
the training ``--sigma`` (the noise it is certified with). ``rsjax.dual.calibrate`` then
chooses offsets of its logits on held-out data (not done here: it needs held-out digits).
With ``--dual-rounds R`` the two parts are trained in turn, ``R - 1`` more rounds (our
design: the paper's text could not be read here, only that it trains the two iteratively):
each round routes every training input by the estimator's smoothed majority
(:func:`vote_shares`), fine-tunes each expert for ``--dual-expert-epochs`` at its sigma on
the inputs routed to it (:func:`finetune_experts`; 0 keeps the experts fixed, the routing
view), and trains the estimator further on :func:`consistent_targets` of the experts' new
hits (:func:`next_round`). The experts of the last round are what ``--dual-experts`` must name
at certification (the closing line says which).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from scipy import special

from rsjax import models
from rsjax.dual._calibrate import estimator_logits
from rsjax.dual._check import parse_experts
from rsjax.training.config import TrainConfig
from rsjax.training.job import ARCHITECTURE, TrainJob, fine_tuned_from
from rsjax.training.trainer import train

__all__ = [
  "RULES",
  "consistent_targets",
  "estimator_targets",
  "expert_hits",
  "finetune_experts",
  "init_from",
  "next_round",
  "targets_from_hits",
  "train_job",
  "vote_shares",
]

#: The target rules of :func:`targets_from_hits` (``--dual-target soft`` is the paper's,
#: ``rsjax.dual.paper.soft_targets``).
RULES = ("confident", "radius")


def expert_hits(
  key: jax.Array,
  experts: Sequence[tuple[Callable, Any]],
  sigmas: Sequence[float],
  x: np.ndarray,
  y: np.ndarray,
  *,
  draws: int = 8,
  batch: int = 256,
) -> np.ndarray:
  """``[K, n]``: the share of ``draws`` noisy copies of each ``x`` (noise at ``sigmas[k]``)
  that expert ``k`` classifies as ``y``.

  Args:
    key: the noise key (expert ``k``, batch ``s`` use ``fold_in(key, k * n + s)``).
    experts: ``K`` pairs ``(apply_fn, params)``.
    sigmas: ``K`` noise levels.
    x: ``[n, *input_shape]`` inputs in [0, 1].
    y: ``[n]`` labels.
    draws: noisy copies per input and expert.
    batch: inputs per call.
  """
  n = len(x)
  p = np.zeros((len(sigmas), n))
  for k, ((apply_fn, params), sigma) in enumerate(zip(experts, sigmas, strict=True)):

    @jax.jit
    def hits(
      key: jax.Array,
      xb: jax.Array,
      yb: jax.Array,
      apply_fn: Callable = apply_fn,
      params: Any = params,
      sigma: float = sigma,
    ) -> jax.Array:
      noise = sigma * jax.random.normal(key, (draws, *xb.shape), xb.dtype)
      noisy = (xb[None] + noise).reshape(-1, *xb.shape[1:])
      pred = jnp.argmax(apply_fn(params, noisy), axis=-1).reshape(draws, -1)
      return jnp.mean(pred == yb[None], axis=0)

    for s in range(0, n, batch):
      xb = jnp.asarray(x[s : s + batch], jnp.float32)
      yb = jnp.asarray(y[s : s + batch])
      p[k, s : s + batch] = np.asarray(hits(jax.random.fold_in(key, k * n + s), xb, yb))
  return p


def targets_from_hits(
  p: np.ndarray, sigmas: Sequence[float], *, draws: int, rule: str = "confident", tau: float = 1.0
) -> np.ndarray:
  """``[n]`` int targets from the hit shares ``p`` (``[K, n]``, :func:`expert_hits`) by
  ``rule`` (module docstring); ``tau`` is the ``"confident"`` rule's share."""
  sig = np.asarray(sigmas, np.float64)
  if rule == "confident":
    order = np.argsort(sig, kind="stable")  # ascending sigma
    ok = p[order] >= tau - 1e-12
    largest = len(sig) - 1 - np.argmax(ok[::-1], axis=0)  # last True in ascending order
    best = order[np.argmax(p[order], axis=0)]  # first max: the smaller sigma on ties
    return np.where(ok.any(axis=0), order[largest], best).astype(np.int64)
  if rule != "radius":
    raise ValueError(f"unknown target rule {rule!r}; expected one of {RULES}")
  q = np.minimum(p, 1.0 - 0.5 / draws)
  radius = np.where(q > 0.5, sig[:, None] * special.ndtri(q), -np.inf)
  none = ~np.isfinite(radius).any(axis=0)
  return np.where(none, int(np.argmin(sig)), np.argmax(radius, axis=0)).astype(np.int64)


def estimator_targets(
  key: jax.Array,
  experts: Sequence[tuple[Callable, Any]],
  sigmas: Sequence[float],
  x: np.ndarray,
  y: np.ndarray,
  *,
  draws: int = 8,
  batch: int = 256,
  rule: str = "confident",
  tau: float = 1.0,
) -> np.ndarray:
  """``[n]`` int: the sigma index of each ``(x, y)`` by ``rule`` (module docstring)."""
  p = expert_hits(key, experts, sigmas, x, y, draws=draws, batch=batch)
  return targets_from_hits(p, sigmas, draws=draws, rule=rule, tau=tau)


def consistent_targets(
  share: np.ndarray, hits: np.ndarray, targets: np.ndarray, *, keep: float = 0.5
) -> np.ndarray:
  """The next round's targets (the estimator half of an iterative training): each input's
  majority vote of the current estimator under its noise where the expert it picks is right
  on at least ``keep`` of its draws, else the input's target of this round.

  The smoothed estimator's radius grows with the share of its vote, so training on its own
  majority makes its choices more unanimous; the experts' hits keep it from routing an
  input to an expert that gets it wrong.

  Args:
    share: ``[n, K]`` the estimator's vote shares (``rsjax.dual.estimator_logits``, argmax).
    hits: ``[K, n]`` the experts' hit shares (:func:`expert_hits`).
    targets: ``[n]`` this round's targets.
    keep: the least hit share of the expert a majority picks.
  """
  majority = np.argmax(share, axis=1)
  ok = hits[majority, np.arange(len(majority))] >= keep
  return np.where(ok, majority, targets).astype(np.int64)


def vote_shares(
  key: jax.Array, apply_fn: Callable, params: Any, x: np.ndarray, *, sigma: float, draws: int
) -> np.ndarray:
  """``[n, K]``: the share of ``draws`` noisy copies ``x + N(0, sigma^2 I)`` on which the
  estimator ``apply_fn(params, .)`` votes each of its ``K`` sigmas (its smoothed vote; the
  argmax is where it routes the input)."""
  logits = estimator_logits(key, apply_fn, params, x, sigma=sigma, draws=draws)
  votes = np.argmax(logits, axis=-1)  # [n, draws]
  return (votes[..., None] == np.arange(logits.shape[-1])).mean(axis=1)


def finetune_experts(
  key: jax.Array,
  experts: Sequence[Any],
  sigmas: Sequence[float],
  data: tuple[np.ndarray, np.ndarray],
  routes: np.ndarray,
  config: TrainConfig,
  workdirs: Sequence[str | None],
  model_configs: Sequence[dict | None],
) -> list[Any]:
  """Each expert trained further, ``config.epochs`` at its own sigma, on the inputs routed to
  it (``routes == k``): copies (the experts passed are not changed); an expert no input is
  routed to is returned as it is.

  Args:
    key: the training key (expert ``k`` trains with ``fold_in(key, k)``).
    experts: ``K`` NNX models.
    sigmas: their ``K`` noise levels.
    data: ``(x [n, ...], y [n])``, the training inputs.
    routes: ``[n]`` int, the expert of each input (the estimator's majority).
    config: the schedule (its ``sigma`` is replaced by each expert's).
    workdirs: where each fine-tuned expert is saved (resumed), or None.
    model_configs: each expert's ``config.json`` fields.
  """
  from flax import nnx

  x, y = data
  tuned = []
  for k, (expert, sigma) in enumerate(zip(experts, sigmas, strict=True)):
    mine = np.asarray(routes) == k
    if not mine.any():
      tuned.append(expert)
      continue
    model, _ = train(
      jax.random.fold_in(key, k),
      nnx.clone(expert),
      (x[mine], y[mine]),
      dataclasses.replace(config, sigma=float(sigma)),
      workdir=workdirs[k],
      model_config=model_configs[k],
      progress=False,
    )
    tuned.append(model)
  return tuned


@dataclasses.dataclass(frozen=True)
class Round:
  """What one round of :func:`next_round` hands on.

  Attributes:
    experts: the ``K`` experts after the round (fine-tuned or as they were).
    targets: ``[n]`` the estimator's next targets.
    routes: ``[n]`` where the estimator routed each input before the round.
  """

  experts: list[Any]
  targets: np.ndarray
  routes: np.ndarray


def next_round(
  key: jax.Array,
  estimator: Any,
  experts: Sequence[Any],
  sigmas: Sequence[float],
  data: tuple[np.ndarray, np.ndarray],
  *,
  sigma_estimator: float,
  draws: int,
  expert_config: TrainConfig | None,
  workdirs: Sequence[str | None],
  model_configs: Sequence[dict | None],
  rule: str = "confident",
  tau: float = 1.0,
  keep: float = 0.5,
) -> Round:
  """One round of the two parts trained in turn (module docstring): route each input by the
  estimator's smoothed majority, fine-tune each expert on its inputs (not when
  ``expert_config`` is None), and the estimator's next targets: its majority where the
  expert it picks is right on at least ``keep`` of ``draws`` noisy copies, else the target
  ``rule`` gives on the experts' new hits (:func:`consistent_targets`)."""
  x, y = data
  apply_fn, params = models.to_apply_fn(estimator)
  share = vote_shares(jax.random.fold_in(key, 0), apply_fn, params, x, sigma=sigma_estimator,
                      draws=draws)  # fmt: skip
  routes = np.argmax(share, axis=1)
  if expert_config is not None:
    experts = finetune_experts(jax.random.fold_in(key, 1), experts, sigmas, data, routes,
                               expert_config, workdirs, model_configs)  # fmt: skip
  fns = [models.to_apply_fn(m) for m in experts]
  hits = expert_hits(jax.random.fold_in(key, 2), fns, sigmas, x, y, draws=draws)
  fallback = targets_from_hits(hits, sigmas, draws=draws, rule=rule, tau=tau)
  return Round(list(experts), consistent_targets(share, hits, fallback, keep=keep), routes)


def init_from(estimator: Any, expert: Any) -> int:
  """Copies into ``estimator`` every parameter of ``expert`` at the same path and of the same
  shape (all but the output layer, for the same architecture), in place; returns how many.

  An estimator smoothed at an expert's sigma then starts from features trained on inputs
  under that very noise (the experts' noise is its own), rather than from scratch."""
  from flax import nnx

  src = {p: v for p, v in nnx.iter_graph(expert) if isinstance(v, nnx.Param)}
  copied = 0
  for path, v in nnx.iter_graph(estimator):
    if isinstance(v, nnx.Param) and path in src and src[path][...].shape == v[...].shape:
      v[...] = src[path][...]
      copied += 1
  return copied


def _experts(text: str | None) -> tuple[list[Any], list[float], list[str], list[dict]]:
  """The experts of ``--dual-experts``: their models, sigmas, directories, and the
  ``config.json`` fields of an expert fine-tuned from each (its architecture, and what it
  derives from, as ``rsjax train --init`` records)."""
  if text is None:
    raise ValueError("--method dual trains the estimator: give --dual-experts SIGMA:DIR,...")
  pairs = parse_experts(text)
  loaded = [models.load_model(where) for _, where in pairs]
  configs = [
    {k: config[k] for k in (*ARCHITECTURE, "dataset") if k in config}
    | {"derived_from": fine_tuned_from(model)}
    for model, config in loaded
  ]
  return [m for m, _ in loaded], [s for s, _ in pairs], [w for _, w in pairs], configs


def _estimator(job: TrainJob, sigmas: Sequence[float], dirs: Sequence[str], init: str) -> Any:
  """A fresh estimator over ``len(sigmas)`` classes, from the expert at the job's sigma with
  ``init="expert"`` (all its layers but the head)."""
  cfg = job.model_config
  seed = int(jax.random.randint(jax.random.fold_in(job.key, 3), (), 0, 2**31 - 1))
  model = models.create_model(
    cfg["model"], num_classes=len(sigmas), input_shape=tuple(cfg["input_shape"]), rngs=seed
  )
  if init == "expert":
    at = [k for k, s in enumerate(sigmas) if s == job.config.sigma]
    if not at:
      raise ValueError(f"--dual-init expert: no expert at --sigma {job.config.sigma}")
    if init_from(model, models.load_model(dirs[at[0]])[0]) == 0:
      raise ValueError(
        f"--dual-init expert: {dirs[at[0]]!r} shares no parameter with the estimator"
      )
  return model


def train_job(
  job: TrainJob,
  *,
  dual_experts: str | None,
  dual_draws: int,
  dual_target: str = "confident",
  dual_tau: float = 1.0,
  dual_temperature: float = 0.25,
  dual_consistency: float = 0.0,
  dual_rebalance: bool = False,
  dual_init: str = "none",
  dual_rounds: int = 1,
  dual_expert_epochs: int = 0,
) -> str:
  """The estimator of ``--dual-experts`` trained on their targets at the job's sigma (from
  the expert at that sigma with ``dual_init="expert"``), then ``dual_rounds - 1`` rounds of
  :func:`next_round` (the experts fine-tuned ``dual_expert_epochs`` each round, saved under
  ``<workdir>/rounds``); the closing line (the share of each target, and the experts to
  certify with when they were fine-tuned). With soft targets, a consistency weight or
  rebalancing, the paper's training instead (``rsjax.dual.paper.train_job``; one round)."""
  if not 0.0 < dual_tau <= 1.0:
    raise ValueError(f"--dual-tau must be in (0, 1], got {dual_tau}")
  if dual_rounds < 1 or dual_expert_epochs < 0:
    raise ValueError("--dual-rounds must be >= 1 and --dual-expert-epochs >= 0")
  experts, sigmas, dirs, configs = _experts(dual_experts)
  if dual_target == "soft" or dual_consistency or dual_rebalance:
    if dual_rounds != 1:
      raise ValueError("--dual-rounds must be 1 with the paper's training (soft targets, "
                       "--dual-consistency, --dual-rebalance)")  # fmt: skip
    from rsjax.dual import paper

    fns = [models.to_apply_fn(m) for m in experts]
    hits = expert_hits(jax.random.fold_in(job.key, 1), fns, sigmas, *job.train_data,
                       draws=dual_draws)  # fmt: skip
    if dual_target == "soft":
      soft = paper.soft_targets(hits, sigmas, draws=dual_draws, temperature=dual_temperature)
    else:
      hard = targets_from_hits(hits, sigmas, draws=dual_draws, rule=dual_target, tau=dual_tau)
      soft = paper.hard_soft_targets(hard, len(sigmas))
    model = _estimator(job, sigmas, dirs, dual_init)
    return paper.train_job(job, soft, sigmas, model, target=dual_target,
                           temperature=dual_temperature, consistency=dual_consistency,
                           rebalance=dual_rebalance)  # fmt: skip

  def targets_of(i: int, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    fns = [models.to_apply_fn(m) for m in experts]
    return estimator_targets(jax.random.fold_in(job.key, i), fns, sigmas, x, y,
                             draws=dual_draws, rule=dual_target, tau=dual_tau)  # fmt: skip

  x, y = job.train_data
  targets = targets_of(1, x, y)
  model = _estimator(job, sigmas, dirs, dual_init)
  config = {**job.model_config, "num_classes": len(sigmas), "dual_sigmas": sigmas,
            "dual_target": dual_target}  # fmt: skip
  tune = dataclasses.replace(job.config, epochs=dual_expert_epochs) if dual_expert_epochs else None
  rounds = os.path.join(job.workdir, "rounds")
  history: list[dict] = []
  eval_data = None
  for r in range(1, dual_rounds + 1):
    if r > 1:
      where = [os.path.join(rounds, f"experts_{r}", f"sigma_{s:g}") for s in sigmas]
      step = next_round(jax.random.fold_in(job.key, 10 + r), model, experts, sigmas, (x, y),
                        sigma_estimator=job.config.sigma, expert_config=tune, workdirs=where,
                        model_configs=configs, draws=dual_draws, rule=dual_target,
                        tau=dual_tau)  # fmt: skip
      dirs = [
        w if new is not old else d
        for w, d, new, old in zip(where, dirs, step.experts, experts, strict=True)
      ]
      experts, targets = step.experts, step.targets
    if job.eval_data is not None and (r == 1 or tune is not None):  # the experts changed
      eval_data = (job.eval_data[0], targets_of(2, *job.eval_data))
    workdir = job.workdir if r == dual_rounds else os.path.join(rounds, f"estimator_{r}")
    key = job.key if r == 1 else jax.random.fold_in(job.key, 20 + r)
    _, history = train(key, model, (x, targets), job.config, eval_data=eval_data,
                       workdir=workdir, resume=True, model_config=config,
                       progress=job.progress)  # fmt: skip
  share = ", ".join(f"sigma {s}: {np.mean(targets == k):.2f}" for k, s in enumerate(sigmas))
  what = f"as the dual sigma estimator at sigma={job.config.sigma} (targets {share})"
  if tune is not None and dual_rounds > 1:
    spec = ",".join(f"{s:g}:{d}" for s, d in zip(sigmas, dirs, strict=True))
    what += f" (certify with --dual-experts {spec})"
  return job.closing(history, what, "noisy accuracy {noisy_acc:.4f}")
