"""The two-stage correlation-eliminated certificate of serialized RS (host, float64):
``srs_p_lower``, ``srs_certificate`` and ``SRSCertificate``.

SRS (``method="srs"``, Gao et al. 2024) samples with warm-started chains
(``rsjax.srs.srs_sample``), which makes the labels dependent and different from those
of the DEQ solved from scratch, so Clopper-Pearson on the SRS counts alone is
not a guarantee. The correlation-eliminated certificate (paper form, eqs. 9,
12-14 of the rebuttal) is, per input, with ``alpha' = alpha / 2``:

1. ``c_A`` = argmax of the ``n0`` selection counts (independent samples).
2. ``N_A`` = SRS count of ``c_A`` among the ``N`` estimation samples.
3. ``m`` check samples are re-solved from z = 0 with the full solver (the
   certified base classifier ``f``); ``m_A`` = #{SRS label = c_A},
   ``k`` = #{SRS label = c_A and f label = c_A}.
4. ``r = LCB(k, m_A, alpha')``; ``p_m_bar = 1 - r`` bounds the mismatch rate.
5. ``N_A_eff = N_A * (1 - p_m_bar)``, ``p_lower = LCB(N_A_eff, N, alpha')``
   (Clopper-Pearson at a non-integer count through the Beta quantile).
6. Abstain if ``p_lower < 1/2``, else ``R = sigma * Phi^-1(p_lower)``.

Why it holds (``check="random"``): let ``T`` be the number of the ``N``
estimation samples whose noisy input ``f`` classifies as ``c_A``. The noises are
i.i.d., so ``T ~ Bin(N, p_A)`` whatever SRS did, and ``LCB(T, N, alpha') <= p_A``
with probability ``>= 1 - alpha'``. The check positions are drawn uniformly
with replacement, independently of everything else, so given the ``N`` pairs,
``k | m_A ~ Bin(m_A, K / N_A)`` with ``K = #{SRS = c_A, f = c_A} <= T``; hence
``r <= K / N_A`` with probability ``>= 1 - alpha'``, and then
``N_A * r <= K <= T``. ``LCB`` is increasing in the count, so
``p_lower <= LCB(T, N, alpha') <= p_A`` with probability ``>= 1 - alpha``
(union bound), which is Cohen et al.'s guarantee for ``f``. No assumption on
the dependence between SRS samples is needed.

Differences from the authors' code (``WeizhiGao/Serialized-Randomized-Smoothing``):

* the code's bound ``LCB(N_A * r, N * r, alpha')`` keeps the ratio ``N_A / N``
  and only shrinks the sample size, which is **less conservative** (larger)
  than the paper's form near ``N_A / N = 1`` and is not covered by the argument
  above; it is available as ``correction="authors_code"`` (which also takes the
  mismatch class from the check subset, as the code does);
* the class of the mismatch test is the certified class ``c_A`` from the ``n0``
  pass (the code takes the argmax of the SRS labels of the check subset, which
  can differ from ``c_A``);
* check positions are random (``check="random"``) rather than the first
  samples after the warm-up chunk (``check="consecutive"``, the code's choice),
  and ``m`` need not be a multiple of the chunk size;
* the chain state and the mismatch rate are reset for every input.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from rsjax import noise as noise_lib
from rsjax import stats
from rsjax.engine.driver import ABSTAIN, Certificate
from rsjax.srs._srs import CORRECTIONS
from rsjax.util import check_alpha

if TYPE_CHECKING:
  from jax.typing import ArrayLike

__all__ = ["SRSCertificate", "srs_certificate", "srs_p_lower"]


@dataclasses.dataclass(frozen=True)
class SRSCertificate(Certificate):
  """A ``Certificate`` from SRS, with the two-stage test's quantities per input.

  Attributes:
    mismatch_upper: ``[B]`` ``p_m_bar = 1 - r``, upper bound on the mismatch rate.
    check_class: ``[B]`` class of the mismatch test.
    check_selected: ``[B]`` ``m_A``, check samples whose SRS label is that class.
    check_agree: ``[B]`` ``k``, those among them the full solver also labels so.
    check_total: ``m``.
    residual: ``[B]`` mean relative residual of the SRS solves.
    check_residual: ``[B]`` mean relative residual of the check solves.
  """

  mismatch_upper: np.ndarray | None = None
  check_class: np.ndarray | None = None
  check_selected: np.ndarray | None = None
  check_agree: np.ndarray | None = None
  check_total: int = 0
  residual: np.ndarray | None = None
  check_residual: np.ndarray | None = None

  def record_fields(self, j: int) -> dict:
    # The two-stage bound is a function of these and the counts (srs_p_lower).
    if self.check_class is None:
      return {}
    return {
      "check_class": int(self.check_class[j]),
      "m_a": int(self.check_selected[j]),
      "k": int(self.check_agree[j]),
      "m": int(self.check_total),
    }


def _lcb(k, n, alpha):
  """Clopper-Pearson lower bound, 0 where ``n < 1`` (no trials) or ``k <= 0``."""
  k = np.asarray(k, np.float64)
  n = np.asarray(n, np.float64)
  ok = n >= 1
  safe_n = np.where(ok, n, 1.0)
  safe_k = np.clip(np.where(ok, k, 0.0), 0.0, safe_n)
  return np.where(ok, stats.clopper_pearson_lower(safe_k, safe_n, alpha), 0.0)


def srs_p_lower(
  n_a: ArrayLike,
  n: ArrayLike,
  k: ArrayLike,
  m_a: ArrayLike,
  alpha: float,
  correction: str = "paper",
) -> tuple[np.ndarray, np.ndarray]:
  """Two-stage lower bound on the top-class probability of the full-solver DEQ.

  Args:
    n_a: SRS count of the class among the ``n`` estimation samples.
    n: number of estimation samples.
    k: check samples labelled as the class by both SRS and the full solver.
    m_a: check samples labelled as the class by SRS.
    alpha: total error level (each stage uses ``alpha / 2``).
    correction: ``"paper"`` (``LCB(N_A r, N, alpha/2)``, sound) or
      ``"authors_code"`` (``LCB(N_A r, N r, alpha/2)``, less conservative).

  Returns:
    ``(p_lower, r)`` float64 arrays; ``r = LCB(k, m_A, alpha/2)`` (0 if m_A = 0).
  """
  alpha = check_alpha(alpha)
  if correction not in CORRECTIONS:
    raise ValueError(f"correction must be one of {CORRECTIONS}, got {correction!r}")
  a2 = alpha / 2
  r = _lcb(k, m_a, a2)
  mismatch_upper = 1.0 - r
  n_a_eff = np.asarray(n_a, np.float64) * (1.0 - mismatch_upper)
  trials = n if correction == "paper" else np.asarray(n, np.float64) * r
  return _lcb(n_a_eff, trials, a2), r


def srs_certificate(
  counts_selection: ArrayLike,
  counts: ArrayLike,
  srs_labels: ArrayLike,
  check_labels: ArrayLike,
  *,
  n: int,
  alpha: float,
  scale: ArrayLike,
  dim: int = 1,
  noise: noise_lib.Noise | str | None = None,
  correction: str = "paper",
  description: str = "",
) -> SRSCertificate:
  """The correlation-eliminated certificate from SRS counts and check pairs (host).

  Args:
    counts_selection: ``[B, C]`` selection counts (``n0`` samples).
    counts: ``[B, C]`` SRS estimation counts (``n`` samples).
    srs_labels: ``[B, m]`` SRS labels of the check samples.
    check_labels: ``[B, m]`` labels of the same noisy inputs solved from z = 0
      with the full solver.
    n: number of estimation samples.
    alpha: total error level.
    scale: ``[B]`` (or scalar) noise scale per input for the radius.
    dim: input dimension (for noise families whose radius needs it).
    noise: noise family (default Gaussian).
    correction: ``"paper"`` (default, sound) or ``"authors_code"``.
    description: the base classifier, for ``guarantee``.

  Returns:
    ``SRSCertificate``.
  """
  noise = noise_lib.get_noise(noise)
  alpha = check_alpha(alpha)  # the correction is checked by srs_p_lower
  c0, c1, s, t = map(np.asarray, (counts_selection, counts, srs_labels, check_labels))
  if c0.shape != c1.shape or c1.ndim != 2:
    raise ValueError(f"counts_selection and counts must both be [B, C], got {c0.shape}, {c1.shape}")
  b, num_classes = c1.shape
  if s.shape != t.shape or s.ndim != 2 or s.shape[0] != b:
    raise ValueError(
      f"srs_labels and check_labels must both be [B={b}, m], got {s.shape}, {t.shape}"
    )
  if s.size and (s.min() < 0 or t.min() < 0):
    raise ValueError("srs_labels/check_labels contain missing (-1) entries")
  m = s.shape[1]
  guess = c0.argmax(axis=1)
  n_a = c1[np.arange(b), guess]
  if correction == "paper":
    cls = guess
  else:  # the code's class: argmax of the SRS labels of the check subset
    cls = np.array(
      [
        np.bincount(si, minlength=num_classes).argmax() if m else g
        for si, g in zip(s, guess, strict=True)
      ],
      dtype=np.int64,
    )
  m_a = np.sum(s == cls[:, None], axis=1)
  k = np.sum((s == cls[:, None]) & (t == cls[:, None]), axis=1)
  p_lower, r = srs_p_lower(n_a, n, k, m_a, alpha, correction)
  ok = p_lower >= 0.5
  scale = np.broadcast_to(np.asarray(scale, np.float64), (b,))
  radius = np.where(ok & (p_lower > 0.5), noise.radius(p_lower, scale, dim), 0.0)
  if correction == "paper":
    what = (
      f"SRS two-stage certificate, paper form LCB(N_A*(1-p_m_bar), N, alpha/2) with "
      f"p_m_bar = 1 - LCB(k, m_A, alpha/2) on m={m} check samples; binary {noise.name} "
      f"{noise.norm} radius for {description or 'the full-solver DEQ'}; holds with prob "
      f">= 1 - {alpha} per input (union of two alpha/2 tests) when the check positions are "
      "random (check='random')"
    )
  else:
    what = (
      f"SRS with the authors' code's bound LCB(N_A*r, N*r, alpha/2) (m={m}): less "
      "conservative than the paper's form and NOT a proven guarantee; for reproducing "
      f"published numbers only ({description})"
    )
  return SRSCertificate(
    prediction=np.where(ok, guess, ABSTAIN).astype(np.int64),
    radius=np.asarray(radius, np.float64),
    p_lower=np.asarray(p_lower, np.float64),
    counts=c1,
    counts_selection=c0,
    norm=noise.norm,
    guarantee=what,
    mismatch_upper=1.0 - r,
    check_class=np.asarray(cls, np.int64),
    check_selected=np.asarray(m_a, np.int64),
    check_agree=np.asarray(k, np.int64),
    check_total=int(m),
    sound=correction == "paper",
  )
