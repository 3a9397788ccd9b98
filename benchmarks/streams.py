"""Budgeted CERTIFY's stopping rules on simulated Bernoulli streams, every rule on the same streams.

For each ``p_A`` a set of streams of top-class indicators is drawn once (their
counts at the union of every rule's looks) and each rule runs on them:

* ``looks``: rsjax's ``Budget`` (alpha split over looks 1k, 2k, ..., N), its own
  ``sequential_bounds`` driven by the streams;
* ``anytime``: rsjax's ``Anytime`` (one-sided mixture per level, weight
  ``agree_weight`` on all-agree and the rest KT, at its ``mixture_share`` of
  alpha after every round, Clopper-Pearson at N at the rest), its own
  ``anytime_bounds``;
* ``fixed``: Cohen's CERTIFY, the Clopper-Pearson bound at N at alpha;
* ``voracek``: the two-sided KT-mixture confidence sequence at alpha (Voracek,
  NeurIPS 2024, arXiv 2406.17830, Alg. 2): the certified level is that of its
  lower end; a stream stops once both ends lie in the same level;
* ``betting``: one-sided betting tests per level and side at alpha/2 (Waudby-Smith
  and Ramdas 2023), the Kelly bet of the smoothed estimate, clipped to 0.9 / m
  (0.9 / (1 - m) for the upper side), fixed within each block between looks (a
  predictable bet); stops like ``voracek``;
* ``floor``: the oracle SPRT that knows ``p_A`` and its level ``j``, Wald's
  expected sample size ``log(1 / alpha) / KL(p_A || m_j)``.

``voracek`` and ``betting`` look on a dense geometric grid (ratio ``dense``),
so they are a little worse than looking after every sample. Levels lost: the
share of streams where a rule certifies a lower grid level than fixed N on the
same stream. Exact worst-case error, at ``p_A`` on each threshold: the
``Anytime`` rule's own decisions at every reachable count and look, stopping
included (``rsjax.engine.anytime.exact_error``); for ``looks``, the probability
that the count ever reaches a look's threshold (:func:`crossing_probability`: the distribution
of the count carried over the looks, the mass that has crossed removed at each look; stopping
early only removes chances, so this bounds the rule's error).

The run in ``benchmarks/results/streams.json``: ``benchmarks/configs/streams.py``.
"""

from __future__ import annotations

import json as jsonlib
import math
import time

import numpy as np
from scipy import signal, special
from scipy import stats as st

from rsjax import claims, noise, stats
from rsjax.engine import anytime
from rsjax.engine import budget as budgeted
from rsjax.engine.anytime_table import cp_count

PS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 0.999, 0.9999, 1.0)
MIX = PS[:8]  # the 8-value mix: 0.5 .. 0.999
RULES = ("looks", "anytime", "fixed", "voracek", "betting")


def crossing_probability(
  p: float, looks: np.ndarray, thresholds: np.ndarray, final: int | None = None
) -> float:
  """``P(exists k: S(n_k) >= thresholds[k], or S(n_K) >= final)`` for i.i.d. Bernoulli(p).

  Args:
    p: success probability.
    looks: ``[K]`` increasing sample counts.
    thresholds: ``[K]`` crossing counts (``> n_k``: no crossing at look k).
    final: an extra crossing count at the last look, or None.
  """
  dist = np.ones(1)
  crossed, n = 0.0, 0
  for k, n_k in enumerate(np.asarray(looks, np.int64)):
    d = int(n_k) - n
    step = st.binom.pmf(np.arange(d + 1), d, p)
    if len(dist) * len(step) > 4_000_000:
      dist = np.clip(signal.fftconvolve(dist, step), 0.0, None)
    else:
      dist = np.convolve(dist, step)
    n = int(n_k)
    c = int(thresholds[k])
    if k + 1 == len(looks) and final is not None:
      c = min(c, int(final))
    if c <= n:
      crossed += float(dist[c:].sum())
      dist[c:] = 0.0
  return crossed


def _kt_lower_thresholds(ms: np.ndarray, a: float, looks: tuple[int, ...]) -> np.ndarray:
  """``[K, L]`` least counts whose two-sided KT set excludes every ``p <= m_j`` at level a."""
  t = np.asarray(looks, np.int64)
  out = np.empty((len(t), len(ms)), np.int64)
  for j, m in enumerate(ms):
    if not m < 1.0:
      out[:, j] = t + 1
      continue
    lo, hi = np.floor(m * t).astype(np.int64) + 1, t + 1
    lo = np.minimum(lo, hi)
    while np.any(hi > lo):
      mid = (lo + hi) // 2
      w = (
        special.betaln(mid + 0.5, t - mid + 0.5)
        - special.betaln(0.5, 0.5)
        - mid * math.log(m)
        - (t - mid) * math.log1p(-m)
      )
      ok = w >= -math.log(a)
      hi = np.where(ok & (hi > lo), mid, hi)
      lo = np.where(~ok & (hi > lo), mid + 1, lo)
    out[:, j] = lo
  return out


def _cs_run(cum, dense, lower_c, upper_c):
  """Stopping on a confidence sequence: ``(samples [R], level [R])``.

  ``lower_c[k, j]``: least count certifying level j; ``upper_c[k, j]``: largest
  count that excludes ``p >= m_j`` (the level out of reach). Stops once the
  certified level reaches the highest one not excluded, or at the last look.
  """
  r = cum.shape[0]
  used = np.full(r, dense[-1])
  level = np.full(r, -1)
  active = np.ones(r, bool)
  for k, n in enumerate(dense):
    s = cum[:, k]
    lvl = claims.nested_level(s, np.broadcast_to(lower_c[k], (r, lower_c.shape[1])))
    cap = (s[:, None] > upper_c[k][None, :]).sum(1) - 1
    # Not even all remaining samples successes reach the level by the last look.
    best = s + (dense[-1] - n)
    cap = np.minimum(cap, claims.nested_level(best, lower_c[-1][None, :].repeat(r, 0)))
    stop = active & ((lvl >= cap) | (k + 1 == len(dense)))
    used[stop], level[stop] = n, lvl[stop]
    active &= ~stop
    if not active.any():
      break
  return used, level


def _betting_run(cum, dense, ms, a):
  """One-sided betting tests per level (lower and upper side, each at a): ``(samples, level)``."""
  r, big = cum.shape[0], len(ms)
  m = np.where(np.isfinite(ms), np.minimum(ms, 1 - 1e-12), 1 - 1e-12)[None, :]
  reach = np.isfinite(ms)[None, :]
  log_lo = np.zeros((r, big))  # capital against p <= m_j
  log_hi = np.zeros((r, big))  # capital against p >= m_j
  used = np.full(r, dense[-1])
  level = np.full(r, -1)
  active = np.ones(r, bool)
  certified = np.zeros((r, big), bool)
  excluded = np.zeros((r, big), bool)
  prev_s, prev_n = np.zeros(r), 0
  target = -math.log(a)
  for k, n in enumerate(dense):
    s = cum[:, k].astype(np.float64)
    ds, dn = (s - prev_s)[:, None], n - prev_n
    p_hat = ((prev_s + 0.5) / (prev_n + 1.0))[:, None]
    lam = np.clip((p_hat - m) / (m * (1 - m)), 0.0, 0.9 / m)
    log_lo += ds * np.log1p(lam * (1 - m)) + (dn - ds) * np.log1p(-lam * m)
    mu = np.clip((m - p_hat) / (m * (1 - m)), 0.0, 0.9 / (1 - m))
    log_hi += ds * np.log1p(-mu * (1 - m)) + (dn - ds) * np.log1p(mu * m)
    certified |= (log_lo >= target) & reach
    excluded |= (log_hi >= target) | ~reach
    lvl = np.cumprod(certified, axis=1).sum(1) - 1
    cap = (~excluded).sum(1) - 1
    # Not even all remaining samples successes at the largest bet reach the level by N.
    best = log_lo + (dense[-1] - n) * np.log1p(0.9 * (1 - m) / m)
    cap = np.minimum(cap, np.cumprod(certified | (best >= target), axis=1).sum(1) - 1)
    stop = active & ((lvl >= cap) | (k + 1 == len(dense)))
    used[stop], level[stop] = n, lvl[stop]
    active &= ~stop
    prev_s, prev_n = s, n
    if not active.any():
      break
  return used, level


def _kl(p: float, m: float) -> float:
  return p * math.log(p / m) + ((1 - p) * math.log((1 - p) / (1 - m)) if p < 1 else 0.0)


def wald_floor(p: float, ms: np.ndarray, a: float, top: int, decide: bool) -> float:
  """Wald's expected sample size of the oracle SPRT that knows p (inf: undecidable).

  It certifies p's own level ``j`` (``log(1/a) / KL(p || m_j)``); with ``decide``
  it also rules out level ``j + 1`` when that level is within reach of N (``top``:
  the highest such level), the larger of the two sizes.
  """
  j = int(np.searchsorted(ms, p, side="right")) - 1
  if j < 0 or p <= ms[j] or j > top:
    return math.inf
  n = math.log(1 / a) / _kl(p, ms[j])
  if decide and j + 1 <= top:
    n = max(n, math.log(1 / a) / _kl(p, ms[j + 1]))
  return n


def run(
  streams: int,
  *,
  n_max: int,
  alpha: float,
  sigma: float,
  grid: tuple[float, ...],
  dense: float,
  stop_alpha: float | None = None,
  ratio: float | None = None,
  mixture_share: float | None = None,
  agree_weight: float | None = None,
) -> dict:
  gauss = noise.get_noise(None)
  old = budgeted.Budget(grid=grid)
  new = anytime.Anytime(
    grid=grid,
    **({} if stop_alpha is None else {"stop_alpha": stop_alpha}),
    **({} if ratio is None else {"ratio": ratio}),
    **({} if mixture_share is None else {"mixture_share": mixture_share}),
    **({} if agree_weight is None else {"agree_weight": agree_weight}),
  )
  ms = anytime.level_table(new.grid, gauss, sigma, 1)
  d_looks = anytime.Anytime(grid=grid, first=10, ratio=dense).looks(n_max)
  union = np.unique(np.concatenate([old.looks(n_max), new.looks(n_max), d_looks]))
  pos = {int(n): i for i, n in enumerate(union)}
  d_t = tuple(int(v) for v in d_looks)
  kt_lo = _kt_lower_thresholds(ms, alpha, d_t)
  # Upper side by symmetry: excluding p >= m at count S is excluding p <= 1 - m at t - S.
  kt_up = np.asarray(d_t)[:, None] - _kt_lower_thresholds(
    np.where(ms < 1, 1.0 - ms, 2.0), alpha, d_t
  )
  kt_up = np.where(np.isfinite(ms)[None, :], kt_up, np.asarray(d_t)[:, None])
  d_idx = np.asarray([pos[n] for n in d_t])
  # The highest level Clopper-Pearson at N can certify (every sample a success).
  top = int(
    budgeted.grid_level(stats.clopper_pearson_lower(n_max, n_max, alpha), new.grid, scale=sigma)
  )
  out: dict = {"per_p": {}}
  for ip, p in enumerate(PS):
    rng = np.random.default_rng(1000 + ip)
    inc = rng.binomial(
      np.diff(np.concatenate([[0], union]))[None, :], p, size=(streams, len(union))
    )
    cum = np.cumsum(inc, axis=1)

    def count_fn(active, start, stop, cum=cum):
      c0 = cum[active, pos[start]] if start else 0
      return cum[active, pos[stop]] - c0

    res = {}
    t0 = time.perf_counter()
    _, used, pl = budgeted.sequential_bounds(
      count_fn, streams, n_max=n_max, alpha=alpha, budget=old, scale=sigma
    )
    res["looks"] = (used, budgeted.grid_level(pl, new.grid, scale=sigma))
    _, used, pl = anytime.anytime_bounds(
      count_fn, streams, n_max=n_max, alpha=alpha, budget=new, scale=sigma
    )
    res["anytime"] = (used, budgeted.grid_level(pl, new.grid, scale=sigma))
    pl = stats.clopper_pearson_lower(cum[:, -1], n_max, alpha)
    res["fixed"] = (np.full(streams, n_max), budgeted.grid_level(pl, new.grid, scale=sigma))
    res["voracek"] = _cs_run(cum[:, d_idx], d_t, kt_lo, kt_up)
    res["betting"] = _betting_run(cum[:, d_idx], d_t, ms, alpha / 2)
    fixed_lvl = res["fixed"][1]
    out["per_p"][str(p)] = {
      "floor": wald_floor(p, ms, alpha, top, decide=False),
      "floor_decide": wald_floor(p, ms, alpha, top, decide=True),
      **{
        name: {
          "mean_samples": float(u.mean()),
          "levels": np.bincount(lv + 1, minlength=len(grid) + 1).tolist(),
          "lost_vs_fixed": float(np.mean(lv < fixed_lvl)),
          "gained_vs_fixed": float(np.mean(lv > fixed_lvl)),
        }
        for name, (u, lv) in res.items()
      },
    }
    print(f"p_A {p}: " + ", ".join(f"{k} {res[k][0].mean():.0f}" for k in RULES)
          + f", floor {wald_floor(p, ms, alpha, top, False):.0f} ({time.perf_counter() - t0:.1f} s)", flush=True)  # fmt: skip
  per = out["per_p"]
  out["mix_mean_samples"] = {
    k: float(np.mean([per[str(p)][k]["mean_samples"] for p in MIX])) for k in RULES
  }
  out["mix_ratio_fixed"] = {k: n_max / v for k, v in out["mix_mean_samples"].items()}
  dec = [str(p) for p in PS if per[str(p)]["floor"] <= n_max]
  fl = sum(per[p]["floor"] for p in dec)
  out["decidable"] = [float(p) for p in dec]
  out["ratio_to_floor"] = {k: sum(per[p][k]["mean_samples"] for p in dec) / fl for k in RULES}
  fd = sum(per[p]["floor_decide"] for p in dec)
  out["ratio_to_floor_decide"] = {
    k: sum(per[p][k]["mean_samples"] for p in dec) / fd for k in RULES
  }
  out["exact_error"] = _exact_errors(old, new, ms, sigma=sigma, n_max=n_max, alpha=alpha)
  return out


def _exact_errors(old, new, ms, *, sigma: float, n_max: int, alpha: float) -> dict:
  """Worst probability of certifying a level at p_A on its threshold (exact recursions).

  ``anytime``: the rule's own decisions at every reachable count and look, stopping
  included (``rsjax.engine.anytime.exact_error``); ``looks``: the count ever reaching a
  look's Clopper-Pearson threshold on the uninterrupted stream (stopping only removes
  chances, so this bounds the rule's error).
  """
  out = {"anytime": [], "looks": [], "thresholds": [float(m) for m in ms]}
  table = anytime.anytime_decisions(new, n_max=n_max, alpha=alpha, scales=[sigma])
  ol, oa = old.looks(n_max), old.alphas(alpha, n_max)
  for j, m in enumerate(ms):
    if not m < 1.0:
      out["anytime"].append(0.0)
      out["looks"].append(0.0)
      continue
    out["anytime"].append(float(sum(anytime.exact_error(table, j))))
    oc = np.asarray([cp_count(m, int(n), float(a)) for n, a in zip(ol, oa, strict=True)])
    out["looks"].append(crossing_probability(m, ol, oc))
  out["max"] = {k: max(out[k]) for k in ("anytime", "looks")}
  return out


def simulate(
  *,
  streams: int = 2000,
  n_max: int = 100_000,
  alpha: float = 0.001,
  sigma: float = 0.25,
  dense: float = 1.01,
  ratio: float | None = None,
  stop_alpha: float | None = None,
  mixture_share: float | None = None,
  agree_weight: float | None = None,
  json: str | None = "benchmarks/results/streams.json",
) -> dict:
  """:func:`run` on ``streams`` streams per ``p_A`` (``dense``: the look ratio of voracek and
  betting; ``ratio``, ``stop_alpha``, ``mixture_share``, ``agree_weight``: ``Anytime``'s, None
  its own); prints the figures, writes ``json``."""
  settings = dict(locals())
  grid = tuple(float(r) for r in np.arange(0, 1.51, 0.25))
  t0 = time.perf_counter()
  out = run(streams, n_max=n_max, alpha=alpha, sigma=sigma, grid=grid, dense=dense,
            stop_alpha=stop_alpha, ratio=ratio, mixture_share=mixture_share,
            agree_weight=agree_weight)  # fmt: skip
  out["settings"] = {**settings, "grid": list(grid), "seconds": time.perf_counter() - t0}
  if json:
    with open(json, "w", encoding="utf-8") as f:
      jsonlib.dump(out, f, indent=1)
  for k in ("mix_mean_samples", "mix_ratio_fixed", "ratio_to_floor", "ratio_to_floor_decide"):
    print(k, {r: round(v, 3) for r, v in out[k].items()})
  for p in ("0.999",) + tuple(str(p) for p in PS if p != 0.999):
    print(p, "lost vs fixed", {k: out["per_p"][p][k]["lost_vs_fixed"] for k in RULES})
  print("exact worst error", out["exact_error"]["max"], "alpha", alpha)
  return out
