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

  python experiments/audit_false_alarms.py            # 500 trials per family
  python experiments/audit_false_alarms.py --trials 100

Output: ``results/audit_false_alarms.json`` (rates, counts, trials, exact
binomial 95% intervals, seconds).
"""

from __future__ import annotations

import math
import time

import _common  # noqa: F401  (puts the repository on sys.path)
import jax
import numpy as np
from scipy import stats as st

from rsjax import audit, noise as noise_lib

FAMILIES = ("gaussian", "laplace", "uniform")
RATES = (0.001, 0.05)
SCALES = (0.9, 0.97)
ROWS, SHAPE, VALUES = 20, (28, 28, 1), 200_000


def interval(k: int, n: int) -> list[float]:
  """The exact (Clopper-Pearson) two-sided 95% interval of a rate ``k / n``."""
  lo = 0.0 if k == 0 else float(st.beta.ppf(0.025, k, n - k + 1))
  hi = 1.0 if k == n else float(st.beta.ppf(0.975, k + 1, n - k))
  return [lo, hi]


def trial(noise, seed: int):
  """The unit noise of one honest audit: ``[ROWS, samples, *SHAPE]``."""
  m = max(2, math.ceil(VALUES / (ROWS * int(np.prod(SHAPE)))))
  ids = np.random.default_rng(seed).choice(10_000, ROWS, replace=False)
  return audit.draw_noise(noise, jax.random.key(seed), ids, m, SHAPE)


def fails(noise, eps, rate: float) -> bool:
  return not all(c.ok for c in audit.noise_tests(noise, eps, false_alarm=rate))


def main():
  ap = _common.parser(__doc__)
  ap.add_argument("--trials", type=int, default=500, help="honest audits per noise family")
  args = ap.parse_args()
  out = {"trials": args.trials, "rows": ROWS, "input_shape": list(SHAPE), "values": VALUES,
         "tests": list(audit.NOISE_TESTS), "families": {}}
  for name in FAMILIES:
    noise = noise_lib.get_noise(name)
    t0 = time.perf_counter()
    alarms = {r: 0 for r in RATES}
    caught = {s: 0 for s in SCALES}
    for seed in range(args.trials):
      eps = trial(noise, seed)
      for r in RATES:
        alarms[r] += fails(noise, eps, r)
      for s in SCALES:
        caught[s] += fails(noise, eps * np.float32(s), RATES[0])
    n = args.trials
    out["families"][name] = {
        "false_alarms": {str(r): {"failed": alarms[r], "rate": alarms[r] / n,
                                  "interval95": interval(alarms[r], n)} for r in RATES},
        "detected_at_0.001": {str(s): {"caught": caught[s], "rate": caught[s] / n,
                                       "interval95": interval(caught[s], n)} for s in SCALES},
        "seconds": round(time.perf_counter() - t0, 1)}
    print(name, out["families"][name], flush=True)
  print(_common.write_json(args.out, "audit_false_alarms.json", out))


if __name__ == "__main__":
  main()
