"""Budgeted CERTIFY versus fixed-N CERTIFY on the same inputs, grid and noise, in one run.

Models: the demo's (``benchmarks.measure.demo_model``, trained once and cached):

* ``mnist-lenet``: the demo's recipe, LeNet on the bundled 5,000 MNIST digits
 , at sigma 0.25 and 0.5.
* ``cifar-shaped-lenet``: no CIFAR-10 is available offline, so a CIFAR-*shaped*
  stand-in: the same digits zero-padded to 32x32 and repeated over 3 channels,
  LeNet with a 3-channel first convolution (CIFAR-10 input statistics), sigma
  0.25, ``cifar_epochs`` epochs. It measures the cost on 32x32x3 inputs; its
  accuracies are not CIFAR-10 accuracies.

For each model and sigma, every ``chunk`` test inputs (every k-th test digit)
are certified by ``rsjax.certify(n=N)`` and then by ``rsjax.certify(n=N,
budget=grid)`` with the same key, ids, ``n0``, ``alpha`` and batch size, so both
see the same noise (an input that budgeted CERTIFY runs to ``N`` has exactly
fixed CERTIFY's counts). Chunks of the sigmas alternate, so both methods and
all sigmas meet the same machine load. Written to ``json`` after every chunk:
per model and sigma, for ``fixed``, ``budgeted`` and ``anytime``, the mean samples per input
(estimation samples; the ``n0`` selection samples come on top of both), the
wall seconds (all chunks, and without the first chunk, which holds the
compilation), the certified accuracy at each grid radius, and each input's
samples, radius and correctness (``per_input``, in ``test_indices`` order).

The run that wrote ``benchmarks/results/budgeted.json`` (2026-11-26; its figures in
``benchmarks/RESULTS.md``, issue 40) is ``benchmarks/configs/budgeted.py``; the earlier
``Anytime`` settings' runs on the same models are ``budgeted_anytime.json`` (alpha in halves),
``budgeted_anytime_share06.json`` (share 0.6, no agree weight, looks 1.05) and
``anytime_settings/*.json`` (``fixed_from`` that first file, ``anytime`` one field changed).

:func:`frontier`:
Issue 40 asks for 12x fewer samples than fixed N at sigma 0.25 on the MNIST
benchmark together with the streams goals (5.5x on the 8-value mix, within
25% of the decide floor, no more levels lost at ``p_A = 0.999``). Three quarters
of the benchmark's digits see every sample agree, so what they cost decides
the ratio. This command measures the trade-off along the knob that makes
them cheaper, ``Anytime.agree_weight``: the prior weight ``w`` on ``q = 1`` in
each level's mixture (``rsjax.claims.mixture_log_wealth``),

  M_t = w 1[S = t] m^-t + (1 - w) M_t^KT,

still anytime-valid (a convex combination of two test supermartingales);
``w = 0`` is the plain one-sided KT mixture (the rule before the field),
``w -> 1`` the likelihood-ratio test of ``p = 1`` alone, the fastest test of an
all-agree input that spends the mixture's share of alpha.

Two parts:

* **MNIST** (from a run of ``benchmarks.budgeted``, default
  ``benchmarks/results/budgeted_anytime_share06.json``, sigma 0.25): the digits
  that stopped at the run's own all-agree stop with the top reachable level
  (no sample disagreed before it), their stop ``n*`` under each ``(share, w)``
  with a look after *every* sample (the most a look schedule can give; for a
  setting slower than the run's, ``n*`` assumes they keep agreeing), and the
  ratio it implies when every other digit keeps its measured samples divided by
  the run's look ratio, what a look at every sample could save it at most
  (optimistic: those samples were measured at the run's weight, and a smaller
  KT weight makes those digits slower).
* **Streams** (2,000 Bernoulli streams per ``p_A``, sigma 0.25, alpha 0.001,
  N = 100,000, the rule's own looks and stopping, ``rsjax.engine.anytime``'s
  decision table at each ``(share, w)``): samples against fixed
  N on the 8-value mix, against the decide floor (``benchmarks.streams``),
  levels lost at 0.999, the all-agree stream's samples, and the exact worst
  error at the thresholds (``rsjax.engine.anytime.exact_error``: the rule's
  decisions at every reachable count, stopping included).
"""

from __future__ import annotations

import dataclasses
import json as jsonlib
import math
import time

import jax
import numpy as np

import rsjax
from benchmarks.measure import demo_model, dump_json
from benchmarks.streams import MIX, PS, wald_floor
from rsjax import claims, metrics, noise, stats
from rsjax.engine import anytime
from rsjax.engine import budget as budgeted_lib
from rsjax.records import spec as runspec

__all__ = ["budgeted", "frontier", "mnist_part", "streams_part"]

GRID = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5)


def _summary(rows, grid):
  correct = np.concatenate([r["correct"] for r in rows])
  radius = np.concatenate([r["radius"] for r in rows])
  samples = np.concatenate([r["samples"] for r in rows])
  times = [r["seconds"] for r in rows]
  return {
    "images": int(correct.size),
    "mean_samples": float(samples.mean()),
    "samples": {k: float(v) for k, v in metrics.samples_summary(samples).items()},
    "wall_s": float(sum(times)),
    "wall_s_without_first_chunk": float(sum(times[1:])),
    "certified_accuracy": {
      f"{r:g}": float(a)
      for r, a in zip(grid, metrics.certified_accuracy(correct, radius, grid), strict=True)
    },
    "per_input": {
      "samples": [int(v) for v in samples],
      "radius": [float(v) for v in radius],
      "correct": [bool(v) for v in correct],
    },
  }


def _earlier_rows(earlier: dict, key: str, ids, method: str) -> dict:
  """One chunk's rows of ``method`` from an earlier run's JSON (wall time: none)."""
  run = earlier[key]
  pos = {int(i): k for k, i in enumerate(run["test_indices"])}
  missing = [int(i) for i in ids if int(i) not in pos]
  if missing:
    raise SystemExit(f"fixed_from: {key} has no row of test inputs {missing}")
  take = [pos[int(i)] for i in ids]
  per = run[method]["per_input"]
  return dict(
    correct=np.asarray(per["correct"])[take],
    radius=np.asarray(per["radius"])[take],
    samples=np.asarray(per["samples"])[take],
    seconds=float("nan"),
  )


def _same_rows(now: dict, before: dict, key: str) -> None:
  """Stops the run unless ``Budget``'s rows equal the earlier run's (same models and code)."""
  same = np.array_equal(now["samples"], before["samples"]) and np.array_equal(
    np.asarray(now["correct"]), before["correct"]
  )
  same = same and np.allclose(now["radius"], before["radius"], rtol=1e-12, atol=0.0)
  if not same:
    raise SystemExit(
      f"--fixed-from: {key}: Budget's rows differ from the earlier run's: not the same models, "
      "inputs, key or code, so its fixed-N rows are not this run's"
    )


def _setups(images, cifar_images, sigmas, cifar_epochs, skip) -> dict:
  """Each run's trained demo model and test inputs, by its key (``"mnist-lenet sigma=0.25"``)."""
  runs = [("mnist-lenet", s, images, 20, False) for s in sigmas if images > 0]
  runs += [("cifar-shaped-lenet", 0.25, cifar_images, cifar_epochs, True)] if cifar_images else []
  setups = {}
  for name, sigma, count, epochs, shape32 in runs:
    demo = demo_model(sigma, epochs=epochs, shape32=shape32)
    idx = np.asarray(runspec.declared_indices(len(demo.x_test), skip=skip, count=count))
    setups[f"{name} sigma={sigma:g}"] = dict(
      model=name, sigma=sigma, apply_fn=demo.apply_fn, params=demo.params, x=demo.x_test,
      y=demo.y_test, idx=idx, clean_accuracy=demo.clean_accuracy,
    )  # fmt: skip
  return setups


def _ratios(entry: dict, rules, key: str, elapsed: float) -> None:
  """Each rule's samples, wall and accuracy gap against fixed N, into ``entry``; printed."""
  f = entry["fixed"]
  for rule in rules:
    b, tag = entry[rule], "" if rule == "budgeted" else f"_{rule}"
    entry["samples_ratio" + tag] = f["mean_samples"] / b["mean_samples"]
    # None with fixed_from: fixed N's time was taken in another run.
    wall = f["wall_s"] / b["wall_s"] if np.isfinite(f["wall_s"]) else None
    entry["wall_ratio" + tag] = wall
    entry["max_accuracy_gap_points" + tag] = 100 * max(
      abs(f["certified_accuracy"][r] - b["certified_accuracy"][r]) for r in f["certified_accuracy"]
    )
    print(
      f"[{elapsed:7.0f}s] {key} {rule}: {b['images']} images, samples {f['mean_samples']:.0f} vs "
      f"{b['mean_samples']:.0f} ({entry['samples_ratio' + tag]:.2f}x), wall {f['wall_s']:.0f}s "
      f"vs {b['wall_s']:.0f}s ({wall or float('nan'):.2f}x), max accuracy gap "
      f"{entry['max_accuracy_gap_points' + tag]:.1f} points",
      flush=True,
    )


def budgeted(
  *,
  images: int = 100,
  cifar_images: int = 20,
  sigmas: tuple[float, ...] = (0.25, 0.5),
  cifar_epochs: int = 10,
  n: int = 100_000,
  n0: int = 100,
  alpha: float = 0.001,
  batch_size: int = 1000,
  chunk: int = 10,
  skip: int = 10,
  rules: tuple[str, ...] = ("budgeted", "anytime"),
  fixed_from: str | None = None,
  anytime_fields: dict | None = None,
  json: str | None = "benchmarks/results/budgeted.json",
) -> dict:
  """Fixed N against the ``rules`` ("budgeted": ``Budget``; "anytime": ``Anytime`` with
  ``anytime_fields`` other than its defaults) on ``images`` MNIST digits (every ``skip``-th) per
  sigma and ``cifar_images`` CIFAR-shaped ones; ``fixed_from``: fixed N's rows from that earlier
  JSON (same models and inputs; "budgeted" must be among the rules and its rows must equal that
  run's, else the run stops)."""
  rule_anytime = anytime.Anytime(GRID, **(anytime_fields or {}))
  earlier = None
  if fixed_from:
    if "budgeted" not in rules:
      raise SystemExit("fixed_from needs 'budgeted' in rules (its rows check the models)")
    with open(fixed_from, encoding="utf-8") as fh:
      earlier = jsonlib.load(fh)["runs"]
  setups = _setups(images, cifar_images, sigmas, cifar_epochs, skip)
  rows = {key: {m: [] for m in ["fixed", *rules]} for key in setups}
  choice = {"fixed": None, "budgeted": GRID, "anytime": rule_anytime}
  cert_key, out, t_start = jax.random.key(1), {}, time.perf_counter()
  for c in range(max(-(-len(s["idx"]) // chunk) for s in setups.values())):
    for key, s in setups.items():
      ids = s["idx"][c * chunk : (c + 1) * chunk]
      if not len(ids):
        continue
      x, y = s["x"][ids], s["y"][ids]
      common = dict(sigma=s["sigma"], num_classes=10, n0=n0, n=n, alpha=alpha,
                    batch_size=batch_size, ids=ids)  # fmt: skip
      for method in rows[key]:
        if earlier is not None and method == "fixed":
          rows[key][method].append(_earlier_rows(earlier, key, ids, "fixed"))
          continue
        budget, t0 = choice[method], time.perf_counter()
        cert = rsjax.certify(cert_key, s["apply_fn"], s["params"], x, budget=budget, **common)
        used = cert.num_samples if budget is not None else np.full(len(ids), n)
        rows[key][method].append(dict(correct=(cert.prediction == y), radius=cert.radius,
                                      samples=used, seconds=time.perf_counter() - t0))  # fmt: skip
      out[key] = {
        "model": s["model"], "sigma": s["sigma"], "clean_accuracy": s["clean_accuracy"],
        "test_indices": [int(i) for i in s["idx"][: (c + 1) * chunk]],
        **{m: _summary(r, GRID) for m, r in rows[key].items()},
      }  # fmt: skip
      if earlier is not None:
        _same_rows(rows[key]["budgeted"][-1], _earlier_rows(earlier, key, ids, "budgeted"), key)
        out[key]["fixed_from"] = fixed_from
      _ratios(out[key], rules, key, time.perf_counter() - t_start)
      dump_json(json, {
        "grid": list(GRID), "n": n, "n0": n0, "alpha": alpha, "batch_size": batch_size,
        "chunk": chunk, "budget": dataclasses.asdict(budgeted_lib.Budget(GRID)),
        "anytime": {**dataclasses.asdict(rule_anytime), "rule": anytime.RULE},
        "looks": [int(v) for v in budgeted_lib.Budget(GRID).looks(n)],
        "jax": jax.__version__, "device": str(jax.devices()[0]), "runs": out,
      })  # fmt: skip
  return out


# ------------------------------------------------------------------------------------------------
# The frontier: Anytime's (mixture_share, agree_weight) on MNIST and on the streams
# ------------------------------------------------------------------------------------------------


def all_agree_stop(m: float, a: float, w: float, n_max: int) -> int:
  """The first ``t`` at which an all-agree input's wealth reaches ``1 / a`` (``n_max + 1``: never)."""
  t = np.arange(1, n_max + 1)
  ok = claims.mixture_log_wealth(t, t, m, w) >= -math.log(a) + 1e-9
  return int(t[np.argmax(ok)]) if ok.any() else n_max + 1


def table(share: float, w: float, *, sigma: float, n_max: int, alpha: float) -> anytime.Decisions:
  """The ``Anytime`` rule's decisions at one ``(mixture_share, agree_weight)``."""
  rule = anytime.Anytime(grid=GRID, mixture_share=share, agree_weight=w)
  return anytime.anytime_decisions(rule, n_max=n_max, alpha=alpha, scales=sigma)


def streams_part(
  share: float,
  w: float,
  *,
  streams: int,
  sigma: float,
  n_max: int,
  alpha: float,
  exact: bool = True,
):
  """The streams metrics of one ``(share, w)``."""
  dec = table(share, w, sigma=sigma, n_max=n_max, alpha=alpha)
  ms = dec.m[0]
  lk = dec.looks
  top = int(np.searchsorted(ms, stats.clopper_pearson_lower(n_max, n_max, alpha), "right")) - 1
  per = {}
  for ip, p in enumerate(PS):
    rng = np.random.default_rng(1000 + ip)
    cum = np.cumsum(rng.binomial(np.diff(np.concatenate([[0], lk]))[None, :], p,
                                 size=(streams, len(lk))), axis=1)  # fmt: skip
    pos = {int(n): i for i, n in enumerate(lk)}

    def count_fn(active, start, stop, cum=cum, pos=pos):
      return cum[active, pos[stop]] - (cum[active, pos[start]] if start else 0)

    _, used, pl = anytime.run_decisions(dec, count_fn, np.zeros(streams, np.int64))
    lvl = np.searchsorted(ms, pl, "right") - 1
    fixed = np.searchsorted(ms, stats.clopper_pearson_lower(cum[:, -1], n_max, alpha), "right") - 1
    per[str(p)] = {
      "mean_samples": float(used.mean()),
      "lost_vs_fixed": float(np.mean(lvl < fixed)),
      "floor": wald_floor(p, ms, alpha, top, decide=False),
      "floor_decide": wald_floor(p, ms, alpha, top, decide=True),
    }
  dec_p = [str(p) for p in PS if per[str(p)]["floor"] <= n_max]
  worst = (
    max(sum(anytime.exact_error(dec, j)) for j, m in enumerate(ms) if m < 1) if exact else None
  )
  return {
    "mix_ratio_fixed": n_max / float(np.mean([per[str(p)]["mean_samples"] for p in MIX])),
    "ratio_to_floor_decide": sum(per[p]["mean_samples"] for p in dec_p)
    / sum(per[p]["floor_decide"] for p in dec_p),
    "lost_at_0.999": per["0.999"]["lost_vs_fixed"],
    "lost_elsewhere": max(v["lost_vs_fixed"] for p, v in per.items() if p not in ("0.999", "0.5")),
    "all_agree_samples": per["1.0"]["mean_samples"],
    "exact_worst_error": worst,
    "per_p": per,
  }


def mnist_part(run: dict, rule: dict, share: float, w: float, *, n_max: int, alpha: float) -> dict:
  """The MNIST ratio a ``(share, w)`` rule with a look at every sample could reach at most.

  Args:
    run: one ``runs`` entry of a ``benchmarks.budgeted`` JSON.
    rule: that JSON's ``anytime`` entry (the rule the run used).
    share, w: the setting to bound.
    n_max, alpha: the run's.
  """
  sigma = float(run["sigma"])
  used = np.asarray(run["anytime"]["per_input"]["samples"], np.float64)
  radius = np.asarray(run["anytime"]["per_input"]["radius"])
  ms = anytime.level_table(GRID, noise.get_noise(None), sigma, 1)
  top = int(np.searchsorted(ms, stats.clopper_pearson_lower(n_max, n_max, alpha), "right")) - 1
  # The run's own all-agree stop: its first look at or past the crossing of the top level.
  run_share = float(rule.get("mixture_share", 0.5))
  run_w = float(rule.get("agree_weight", 0.0))
  looks = np.asarray(claims.anytime_looks(n_max, int(rule["first"]), float(rule["ratio"])))
  cross = all_agree_stop(float(ms[top]), alpha * run_share, run_w, n_max)
  n_run = int(looks[np.searchsorted(looks, cross)])
  # Digits that stopped there at the top level saw no sample disagree before it.
  agree = (used == n_run) & (radius >= GRID[top] - 1e-9)
  n_star = all_agree_stop(float(ms[top]), alpha * share, w, n_max)
  others = np.where(used[~agree] >= n_max, n_max, used[~agree] / float(rule["ratio"])).sum()
  total = agree.sum() * n_star + others
  return {
    "all_agree_digits": int(agree.sum()),
    "all_agree_measured_samples": n_run,
    "all_agree_stop_every_sample": n_star,
    "others_optimistic_samples": float(others),
    "ratio_at_most": n_max * len(used) / float(total),
  }


def frontier(
  *,
  run_json: str = "benchmarks/results/budgeted_anytime_share06.json",
  run: str = "mnist-lenet sigma=0.25",
  shares: tuple[float, ...] = (0.6, 0.7),
  weights: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 0.9, 0.99),
  streams: int = 2000,
  exact: bool = True,
  json: str | None = "benchmarks/results/budgeted_frontier.json",
) -> dict:
  """``Anytime``'s ``(mixture_share, agree_weight)`` trade-off (see the module docstring): the
  MNIST bound from ``run`` of ``run_json`` and the streams' figures at each of ``shares`` x
  ``weights`` (``exact``: with the exact worst errors; False for quick runs)."""
  settings = dict(locals())
  with open(run_json, encoding="utf-8") as fh:
    bench = jsonlib.load(fh)
  entry = bench["runs"][run]
  n_max, alpha, sigma = int(bench["n"]), float(bench["alpha"]), float(entry["sigma"])
  t0 = time.perf_counter()
  rows = []
  for share in shares:
    for w in weights:
      row = {"share": share, "w": w,
             "mnist": mnist_part(entry, bench["anytime"], share, w, n_max=n_max, alpha=alpha),
             "streams": streams_part(share, w, streams=streams, sigma=sigma, n_max=n_max,
                                     alpha=alpha, exact=exact)}  # fmt: skip
      rows.append(row)
      s, mn = row["streams"], row["mnist"]
      print(
        f"share {share:.2f} w {w:.2f}: MNIST all-agree stop {mn['all_agree_stop_every_sample']}"
        f", ratio <= {mn['ratio_at_most']:.2f}x | streams mix {s['mix_ratio_fixed']:.2f}x, "
        f"decide floor {s['ratio_to_floor_decide']:.3f}x, lost@.999 {s['lost_at_0.999']:.4f}, "
        f"lost elsewhere {s['lost_elsewhere']:.4f}, all-agree {s['all_agree_samples']:.0f}, "
        f"exact worst {s['exact_worst_error'] or float('nan'):.2e}",
        flush=True,
      )
  out = {
    "settings": {
      **settings,
      "n_max": n_max,
      "alpha": alpha,
      "sigma": sigma,
      "seconds": time.perf_counter() - t0,
    },  # fmt: skip
    "rows": rows,
  }
  dump_json(json, out)
  return out
