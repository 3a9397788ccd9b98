"""How often `rsjax audit`'s noise tests fail an honest run, and how often they catch a shrunk one.

An audit's counts check is exact (no false alarm on the run's platform and
precision); its noise tests (``rsjax.audit.noise_tests``: mean, variance,
Kolmogorov-Smirnov, correlation across samples and across coordinates, each at
``false_alarm / 5``) are the one random part. Here each trial is the noise check
of one honest audit: the unit estimation noise of 20 rows (``rsjax.audit.draw_noise``,
the stream rsjax certifies with) of a run with its own seed, on MNIST-shaped
inputs (28x28x1), with the audit's default 200,000 values. Per noise family:

* the false-alarm rate of honest streams, at the audit's default rate 0.001 and
  at 0.05 (where a few hundred trials measure it well);
* the detection rate of the same streams scaled by 0.9 (the attack of arXiv
  2306.14043) and by 0.97, at 0.001.

Commands::

  python experiments/audit_false_alarms.py           # 500 trials per family (~25 min, 2 cores)
  python experiments/audit_false_alarms.py --quick   # 50 trials per family

Output: ``results/audit_false_alarms.json`` (rates, counts, trials, exact
binomial 95% intervals, seconds). Numbers produced (500 trials per family,
2026-11-25)::

  family     false alarms at 0.001   at 0.05            caught x0.9 / x0.97 at 0.001
  gaussian   0 / 500                 26 / 500 (0.052)   500 / 500, 500 / 500
  laplace    0 / 500                 17 / 500 (0.034)   500 / 500, 500 / 500
  uniform    0 / 500                 25 / 500 (0.050)   500 / 500, 500 / 500
"""

from __future__ import annotations

import dataclasses
import math
import time

import jax
import numpy as np
from scipy import stats as st

from _common import RESULTS, parser, write_json
from rsjax import audit, noise as noise_lib

FAMILIES = ("gaussian", "laplace", "uniform")


@dataclasses.dataclass(frozen=True)
class Config:
  trials: int = 500  # honest audits per noise family
  rates: tuple[float, ...] = (0.001, 0.05)  # stated false-alarm rates
  scales: tuple[float, ...] = (0.9, 0.97)  # shrunk noise, tested at rates[0]
  rows: int = 20
  shape: tuple[int, ...] = (28, 28, 1)
  values: int = 200_000  # noise values per audit (the audit's default)


def get_config(quick: bool = True) -> Config:
  """500 trials per family, or 50 with ``quick``.

  Commands::

    python experiments/audit_false_alarms.py
    python experiments/audit_false_alarms.py --quick
  """
  return Config(trials=50) if quick else Config()


def interval(k: int, n: int) -> list[float]:
  """The exact (Clopper-Pearson) two-sided 95% interval of a rate ``k / n``."""
  lo = 0.0 if k == 0 else float(st.beta.ppf(0.025, k, n - k + 1))
  hi = 1.0 if k == n else float(st.beta.ppf(0.975, k + 1, n - k))
  return [lo, hi]


def trial(noise, cfg: Config, seed: int):
  """The unit noise of one honest audit: ``[rows, samples, *shape]``."""
  m = max(2, math.ceil(cfg.values / (cfg.rows * int(np.prod(cfg.shape)))))
  ids = np.random.default_rng(seed).choice(10_000, cfg.rows, replace=False)
  return audit.draw_noise(noise, jax.random.key(seed), ids, m, cfg.shape)


def fails(noise, eps, rate: float) -> bool:
  return not all(c.ok for c in audit.noise_tests(noise, eps, false_alarm=rate))


def run(cfg: Config, out_dir: str = RESULTS) -> dict:
  out = {"config": dataclasses.asdict(cfg), "tests": list(audit.NOISE_TESTS), "families": {}}
  n = cfg.trials
  for name in FAMILIES:
    noise = noise_lib.get_noise(name)
    t0 = time.perf_counter()
    alarms = {r: 0 for r in cfg.rates}
    caught = {s: 0 for s in cfg.scales}
    for seed in range(n):
      eps = trial(noise, cfg, seed)
      for r in cfg.rates:
        alarms[r] += fails(noise, eps, r)
      for s in cfg.scales:
        caught[s] += fails(noise, eps * np.float32(s), cfg.rates[0])
    out["families"][name] = {
        "false_alarms": {str(r): {"failed": alarms[r], "rate": alarms[r] / n,
                                  "interval95": interval(alarms[r], n)} for r in cfg.rates},
        f"detected_at_{cfg.rates[0]}": {
            str(s): {"caught": caught[s], "rate": caught[s] / n,
                     "interval95": interval(caught[s], n)} for s in cfg.scales},
        "seconds": round(time.perf_counter() - t0, 1)}
    print(name, out["families"][name], flush=True)
  print(write_json(out_dir, "audit_false_alarms.json", out))
  return out


def main(argv=None):
  ap = parser(__doc__)
  ap.add_argument("--quick", action="store_true", help="50 trials per family")
  args = ap.parse_args(argv)
  run(get_config(args.quick), args.out)


if __name__ == "__main__":
  main()
