"""Budgeted CERTIFY with anytime-valid tests at every look: the ``Anytime`` sampling rule.

``rsjax.engine.budget.Budget`` splits ``alpha`` over a few fixed looks and pays
for every look it takes. ``Anytime`` looks on a dense schedule and pays
nothing for looking (Ville's inequality), so an input stops within a few
percent of the samples it needs:

* **Per grid level, an anytime-valid test** at ``mixture_share * alpha``
  (default ``0.6 alpha``): a one-sided mixture of likelihood ratios against
  ``p_A = m_j``, ``m_j`` the smallest probability whose radius reaches the
  level's radius ``r_j`` (``rsjax.claims.mixture_thresholds``): weight
  ``agree_weight`` (default 1/2) on ``q = 1``, where every sample agrees, and
  the rest on the Krichevsky-Trofimov prior Beta(1/2, 1/2) restricted to
  ``[m_j, 1]`` (Voracek, NeurIPS 2024, arXiv 2406.17830, one-sided). At
  look ``n_k`` the test is an integer threshold ``c_j(n_k)`` on the top-class
  count, computed on the host once per ``(m_j, alpha, looks)`` and cached.
  The certified level at a look is the highest ``j`` whose test and those of
  every level below reject (``rsjax.claims.nested_level``); ``p_lower`` is
  ``m_j``.
* **At ``n_max``, Cohen's look** at the rest of ``alpha``: the one-sided
  Clopper-Pearson bound of the count, so an input that runs to ``n_max``
  certifies nearly what fixed-N CERTIFY would; ``p_lower`` is the larger of
  the two bounds.

Soundness: reporting a level ``j`` with ``m_j > p_A`` needs the mixture of the
lowest such level ``j_0`` to have crossed ``1 / (s alpha)`` at some look
(probability ``<= s alpha`` by Ville, whatever the stopping rule; ``s`` the
``mixture_share``), or the Clopper-Pearson bound at ``n_max`` to exceed
``p_A`` (``<= (1 - s) alpha``): ``alpha`` in all, per input. The decision at a
look is one pure function of the count (``Decisions.decide``);
``tests/test_anytime.py`` applies it to every reachable count at every look in
a forward recursion over the count distribution, the exact probability of a
wrong level, stopping included.

**The stopping rule** (efficiency only; checked at every look): an input stops
when its level is the top of the grid, or when the level above is unlikely to
be reached by ``n_max``: the count at ``n_max`` it needs (mixture or Clopper-Pearson) lies above the predicted count
by more than ``z`` standard deviations, ``z`` the upper ``stop_alpha`` normal
quantile, with ``p_A`` estimated from the count so far and the spread of the
estimate and of the samples still to come together (this covers futility:
``p_A`` below the next level, and abstain). It is ``rsjax.claims.anytime_stop``,
which ``rsjax verify`` applies to a row's recorded counts at the look it stopped at.

**Rounds and looks.** The looks (``first``, then ratio ``ratio``: about 650 up
to ``n_max = 100,000``) are where the tests are read; the device draws in
fewer, larger rounds (``round_ratio``: whole steps of ``batch_size``, about 20
rounds up to ``n_max``) through ``rsjax.engine.rounds.round_sampler``, which
returns the class of every sample, so the host reads the count at every look
inside a round and an input stops at its first stopping look. The samples
past it that its last round drew are computed but not used: the certificate,
``num_samples`` and the counts are those of the first ``num_samples`` samples
of CERTIFY's estimation stream (``fold_in(fold_in(key, 1), id)``), whatever
the rounds, batch size or devices.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np
from jax.typing import ArrayLike

from rsjax import noise as noise_lib
from rsjax import stats
from rsjax.claims import ANYTIME_RULE, anytime_looks
from rsjax.engine.anytime_table import (
  Decisions,
  anytime_decisions,
  exact_error,
  level_table,
  run_decisions,
)
from rsjax.engine.budget import BudgetedCertificate, budgeted_selection, check_looks, radius_grid
from rsjax.engine.driver import ESTIMATION, CountsFn, RuleFn, Sampling
from rsjax.engine.rounds import CountFn, SampleFn, round_sampler

__all__ = [
  "Anytime",
  "Decisions",
  "anytime_bounds",
  "anytime_decisions",
  "exact_error",
  "level_table",
  "run_decisions",
]

#: The rule's name in a run's record (``details["budget"]["rule"]``).
RULE = ANYTIME_RULE


@dataclasses.dataclass(frozen=True)
class Anytime:
  """Budgeted CERTIFY with an anytime-valid test per grid level at every look.

  A sampling rule (``rsjax.engine.driver.SamplingRule``) beside ``FixedN`` and
  ``Budget``: ``rsjax.certify(..., budget=Anytime(grid=...))``.

  Attributes:
    grid: the radii whose certified accuracy matters, ascending, >= 0 (0 is
      added when missing).
    first: samples at the first look.
    ratio: growth of the looks, ``n_{k+1} = max(n_k + 1, ceil(ratio n_k))``.
      Looking is free (Ville's inequality) and cheap (two lookups per input
      on the host, not a round of the engine): a smaller ratio overshoots an
      input's crossing less. 1.01 (about 650 looks up to 100,000) stops an input
      at most 1% past its crossing; 1.05 cost the MNIST benchmark 1.4% more
      samples at sigma 0.25 (``benchmarks/RESULTS.md``).
    round_ratio: growth of the engine's rounds (not of the looks): a round draws
      whole steps of ``batch_size`` samples up to about ``round_ratio`` times
      the samples so far, and the host looks at every look inside it. It only
      trades compute past an input's stop against host syncs; the certificate,
      the samples used and the counts do not depend on it.
    stop_alpha: tail level of the futility test (the stopping rule only): a
      larger value stops earlier and more often one level below ``n_max``'s.
    mixture_share: the share of ``alpha`` spent on the mixture tests, in (0, 1);
      the rest is the Clopper-Pearson look at ``n_max``. More makes the early
      stops cheaper and the inputs that run to ``n_max`` certify a little less:
      0.6 is the largest share that lost no more grid levels against fixed N
      than 0.5 on ``benchmarks.streams`` (11.45% of streams at ``p_A = 0.999``;
      0.7 lost 14.6%), for 6.16x fewer samples than fixed N instead of 6.11x.
    agree_weight: the mixture prior's weight on ``q = 1`` (every sample of the
      top class), in ``[0, 1)``; the rest is the one-sided KT prior. An input
      whose samples all agree stops at about ``log(1 / (w s alpha)) / -log(m_j)``
      samples instead of the KT mixture's later crossing; every other input's
      test needs ``log(1 / (1 - w))`` more evidence. 1/2 splits the prior evenly
      between the two; 0 is the plain KT mixture (records before the field).
      ``benchmarks/configs/frontier.py`` measures the trade-off.
  """

  grid: tuple[float, ...]
  first: int = 100
  ratio: float = 1.01
  stop_alpha: float = 0.002
  round_ratio: float = 1.25
  mixture_share: float = 0.6
  agree_weight: float = 0.5

  def __post_init__(self) -> None:
    object.__setattr__(self, "grid", radius_grid(self.grid))
    check_looks(self.first, self.ratio)
    if not float(self.round_ratio) > 1.0:
      raise ValueError(f"round_ratio must be > 1, got {self.round_ratio!r}")
    stats.check_alpha(self.stop_alpha)
    if not 0.0 < float(self.mixture_share) < 1.0:
      raise ValueError(f"mixture_share must lie in (0, 1), got {self.mixture_share!r}")
    if isinstance(self.agree_weight, bool) or not 0.0 <= float(self.agree_weight) < 1.0:
      raise ValueError(f"agree_weight must lie in [0, 1), got {self.agree_weight!r}")

  def looks(self, n_max: int) -> np.ndarray:
    """The looks ``n_1 < ... < n_K = n_max``: ``[K]`` int64."""
    return np.asarray(anytime_looks(n_max, self.first, self.ratio), np.int64)

  def record(self) -> dict:
    """The rule and its parameters, for the run's record (``rsjax verify`` reads them)."""
    return {"rule": RULE, "first": int(self.first), "ratio": float(self.ratio),
            "stop_alpha": float(self.stop_alpha),
            "mixture_share": float(self.mixture_share),
            "agree_weight": float(self.agree_weight)}  # fmt: skip

  def run(
    self, key: jax.Array, counts: CountsFn, rule: RuleFn, settings: Sampling
  ) -> BudgetedCertificate:
    """The sampling rule: ``n0`` selection samples, then the estimation in rounds.

    Raises:
      ValueError: for another method than Cohen's binary one, or ``batch_size="auto"``.
    """
    source, cohen, c0 = budgeted_selection(key, counts, rule, settings)
    noise, n, alpha = settings.noise, settings.n, settings.alpha
    sample_fn = round_sampler(jax.random.fold_in(key, ESTIMATION), source, settings)
    cache = _Rounds(sample_fn, c0.argmax(axis=1), source.num_classes, n_max=n,
                    step=min(settings.fixed_batch("the anytime rule"), n), ratio=self.round_ratio)  # fmt: skip
    _, used, p_lower = anytime_bounds(
      cache, len(source.x), n_max=n, alpha=alpha, budget=self, noise=noise,
      scale=cohen.scale, dim=cohen.dim,
    )  # fmt: skip
    test = (
      f", anytime-valid: one-sided mixture test (KT, weight {self.agree_weight:g} on "
      f"all-agree) per grid level at {self.mixture_share:g} alpha at every look, "
      f"Clopper-Pearson at n={n} at the rest"
    )
    return BudgetedCertificate.of_bounds(
      cohen, c0, cache.counts(used), used, p_lower, settings, self.grid, test
    )


class _Rounds:
  """The successes of any look range from the engine's rounds (a ``CountFn``).

  A request past the samples drawn so far draws one round for the inputs still
  running: whole steps up to about ``ratio`` times the samples so far (at least
  ``stop``, at most ``n_max``); later requests inside it are answered from its
  per-sample classes on the host. Every input asked about at a request has
  been drawn in the same rounds, so one end serves them all, and the classes
  of the running inputs since ``base`` are one ``[A, end - base]`` array with
  the running count of top-class samples beside it: a request is two lookups
  per input, whatever the number of looks.
  """

  def __init__(
    self, sample_fn: SampleFn, guess: np.ndarray, num_classes: int, *, n_max: int, step: int,
    ratio: float,
  ) -> None:  # fmt: skip
    self.sample_fn, self.guess, self.n_max, self.step, self.ratio = (
      sample_fn, guess, n_max, step, ratio,
    )  # fmt: skip
    b = len(guess)
    self.full = np.zeros((b, num_classes), np.int64)  # class counts before the kept classes
    self.kept: dict[int, tuple[int, np.ndarray]] = {}  # stopped inputs: (base, classes)
    self.row = np.full(b, -1, np.int64)  # row of each running input in cls / hits
    self.cls = np.zeros((0, 0), np.int8)  # [A, end - base] classes of samples base .. end - 1
    self.hits = np.zeros((0, 1), np.int32)  # [A, end - base + 1] top-class counts from base
    self.base = 0
    self.end = 0
    self.num_classes = num_classes

  def __call__(self, active: np.ndarray, start: int, stop: int) -> np.ndarray:
    active = np.asarray(active, np.int64)
    if stop > self.end:
      new_end = max(stop, math.ceil(self.end * self.ratio), self.end + self.step)
      new_end = min(self.n_max, -(-new_end // self.step) * self.step)
      new = np.asarray(self.sample_fn(active, self.end, new_end))
      running = np.flatnonzero(self.row >= 0)
      for i in np.setdiff1d(running, active).tolist():  # stopped since the last round
        self.kept[i] = (self.base, self.cls[self.row[i]])
      old = self.cls[self.row[active]] if len(running) else np.zeros((len(active), 0), new.dtype)
      for r, i in enumerate(active.tolist()):
        self.full[i] += self._hist(old[r, : start - self.base])
      self.cls = np.concatenate([old[:, start - self.base :], new], axis=1)
      top = self.cls == self.guess[active][:, None]
      self.hits = np.concatenate(
        [np.zeros((len(active), 1), np.int32), np.cumsum(top, axis=1, dtype=np.int32)], axis=1
      )
      self.row[:] = -1
      self.row[active] = np.arange(len(active))
      self.base, self.end = start, new_end
    rows = self.row[active]
    return (self.hits[rows, stop - self.base] - self.hits[rows, start - self.base]).astype(np.int64)

  def _hist(self, classes: np.ndarray) -> np.ndarray:
    # -3 (an invalid draw of the sound 8-bit noise) is a sample of no class.
    return np.bincount(classes[classes >= 0], minlength=self.num_classes)[: self.num_classes]

  def counts(self, used: np.ndarray) -> np.ndarray:
    """``[B, C]`` int32 class counts of the first ``used[i]`` samples of each input."""
    out = self.full.copy()
    for i in range(len(out)):
      if self.row[i] >= 0:
        base, cls = self.base, self.cls[self.row[i]]
      elif i in self.kept:
        base, cls = self.kept[i]
      else:
        continue
      out[i] += self._hist(cls[: int(used[i]) - base])
    return out.astype(np.int32)


def anytime_bounds(
  count_fn: CountFn,
  num_inputs: int,
  *,
  n_max: int,
  alpha: float,
  budget: Anytime,
  noise: noise_lib.Noise | str | None = None,
  scale: ArrayLike = 1.0,
  dim: int = 1,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """The looks, tests and stopping rule on the host, for any source of counts.

  Args:
    count_fn: ``count_fn(active [m] int, start, stop) -> [m]`` top-class
      successes among samples ``start .. stop - 1`` (``rsjax.engine.rounds``
      on device; simulated counts in the tests and the streams benchmark).
    num_inputs: B.
    n_max: the largest number of estimation samples per input.
    alpha: the error level per input.
    budget: grid, looks and stopping level.
    noise: noise family of the radius.
    scale: ``[B]`` (or scalar) noise scale.
    dim: input dimension (Linf radius of uniform noise).

  Returns:
    ``(successes [B] int64, samples [B] int64, p_lower [B] float64)`` at the
    look where each input stopped.
  """
  scale = np.broadcast_to(np.asarray(scale, np.float64), (num_inputs,))
  uniq, which = np.unique(scale, return_inverse=True)
  table = anytime_decisions(budget, n_max=n_max, alpha=alpha, noise=noise, scales=uniq, dim=dim)
  return run_decisions(table, count_fn, which)
