"""``rsjax audit``: check a certify run against its model and its noise.

:func:`verify <rsjax.verify.verify>` checks that the radii follow from the
recorded counts; it cannot tell whether the counts are the model's. An audit,
given the model, checks that they are:

1. **The run's model and inputs.** The fingerprint of the model's parameters
   equals the recorded one, and the fingerprint of every audited input equals
   the recorded one.
2. **The counts.** For ``rows`` rows chosen at random (seeded), the selection
   and estimation counts are drawn again from the recorded key derivation
   (``rsjax.record.KEY_DERIVATION``) with the run's method and settings
   (``rsjax certify``'s flags, precision included, read from the run record
   into :mod:`rsjax.launch`), and must equal the recorded counts exactly:
   rsjax's counts are a function of key, input index, model and settings, so
   on the same platform and precision there is no false alarm. An edited
   count, a swapped checkpoint or a noise stream other than the one recorded
   changes them. A method's own per-row facts (DDRS's and IDRS's sigma(x)) are
   drawn again too and compared to :data:`FLOAT_RTOL` (DDRS's sigma comes from
   a batched ascent: drawn in other batches than the run's, it may move by an
   ulp).
3. **The noise.** The unit noise the rows were certified with
   (``rsjax.sample_noise``, the one function every sampler draws through) is
   tested against its family's distribution (:func:`noise_tests`): the mean,
   the variance (the attack of arXiv 2306.14043 shrinks it), the distribution
   (Kolmogorov-Smirnov) and independence between consecutive samples and
   between neighbouring coordinates. Each test runs at ``false_alarm / 5``, so
   an honest stream fails the noise check with probability at most
   ``false_alarm`` (Bonferroni).

An audit also runs :func:`rsjax.verify.verify` on the whole file. A run passes
when every check passes; otherwise :attr:`AuditReport.reason` is one line.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats as st

from rsjax import io, launch, sample_noise
from rsjax import record as record_lib
from rsjax import verify as verify_lib

__all__ = ["AuditError", "AuditReport", "Check", "audit", "noise_tests", "NOISE_TESTS"]

NOISE_TESTS = ("mean", "variance", "distribution", "independence across samples",
               "independence across coordinates")


class AuditError(ValueError):
  """A run cannot be audited (no record, not a 'rsjax certify' run, no model, ...)."""


@dataclasses.dataclass(frozen=True)
class Check:
  """One check of an audit.

  Attributes:
    name: what was checked.
    ok: whether it passed.
    detail: one line (the numbers).
  """

  name: str
  ok: bool
  detail: str

  def __str__(self) -> str:
    return f"{'ok  ' if self.ok else 'FAIL'} {self.name}: {self.detail}"


@dataclasses.dataclass(frozen=True)
class AuditReport:
  """What :func:`audit` found.

  Attributes:
    path: the result file.
    rows: the dataset indices audited.
    checks: every check, in order.
    false_alarm: the stated false-alarm rate of the noise tests.
  """

  path: str
  rows: tuple[int, ...]
  checks: tuple[Check, ...]
  false_alarm: float

  @property
  def ok(self) -> bool:
    return all(c.ok for c in self.checks)

  @property
  def reason(self) -> str:
    """The first failed check in one line ("" when the run passes)."""
    for c in self.checks:
      if not c.ok:
        return f"{c.name}: {c.detail}"
    return ""

  def summary(self) -> str:
    if self.ok:
      return (f"audit passed: {self.path}, {len(self.rows)} rows re-drawn with identical counts, "
              f"noise tests passed at false-alarm rate {self.false_alarm:g}")
    return f"audit FAILED: {self.path}: {self.reason}"


# ----------------------------------------------------------------------------- noise tests


def _family(noise):
  """``(scipy distribution, variance, fourth moment)`` of a family's unit noise."""
  name = type(noise).__name__.lower()
  if name == "gaussian":
    return st.norm(), 1.0, 3.0
  if name == "laplace":
    return st.laplace(), 2.0, 24.0
  if name == "uniform":
    return st.uniform(loc=-1.0, scale=2.0), 1.0 / 3.0, 1.0 / 5.0
  raise AuditError(f"no goodness-of-fit test for {noise!r}")


def _corr_p(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
  """Pearson correlation of paired samples and its two-sided p-value (normal approximation)."""
  a = a - a.mean()
  b = b - b.mean()
  r = float((a * b).sum() / math.sqrt((a * a).sum() * (b * b).sum()))
  return r, float(2 * st.norm.sf(abs(r) * math.sqrt(a.size)))


def noise_tests(noise, eps, *, false_alarm: float = 1e-3) -> list[Check]:
  """Goodness-of-fit tests of unit noise against its family.

  Args:
    noise: the noise family (``rsjax.noise``).
    eps: ``[rows, samples, *input_shape]`` unit noise (``rsjax.sample_noise``),
      at least 2 samples and 2 coordinates.
    false_alarm: the probability that noise of the family fails at least one
      test (each of the 5 runs at ``false_alarm / 5``).

  Returns:
    One :class:`Check` per test of :data:`NOISE_TESTS`.
  """
  dist, var, m4 = _family(noise)
  e = np.asarray(eps, np.float64)
  e = e.reshape(e.shape[0], e.shape[1], -1)
  if e.shape[1] < 2 or e.shape[2] < 2:
    raise ValueError(f"noise_tests needs >= 2 samples and coordinates, got {e.shape}")
  level = false_alarm / len(NOISE_TESTS)
  x = e.reshape(-1)
  n = x.size
  out = []
  mean = x.mean()
  p = float(2 * st.norm.sf(abs(mean) / math.sqrt(var / n)))
  out.append(("mean", p, f"mean {mean:.3e} of {n} values (expected 0)"))
  s2 = float((x * x).mean())
  p = float(2 * st.norm.sf(abs(s2 - var) / math.sqrt((m4 - var * var) / n)))
  out.append(("variance", p, f"variance {s2:.5f}, expected {var:.5f} (ratio of scales "
              f"{math.sqrt(s2 / var):.4f})"))
  ks = st.kstest(x, dist.cdf)
  out.append(("distribution", float(ks.pvalue), f"Kolmogorov-Smirnov D {ks.statistic:.2e} "
              f"against {type(noise).__name__}"))
  r, p = _corr_p(e[:, :-1, :].reshape(-1), e[:, 1:, :].reshape(-1))
  out.append(("independence across samples", p, f"correlation of consecutive samples {r:.2e}"))
  r, p = _corr_p(e[:, :, :-1].reshape(-1), e[:, :, 1:].reshape(-1))
  out.append(("independence across coordinates", p,
              f"correlation of neighbouring coordinates {r:.2e}"))
  return [Check(f"noise {name}", pv > level, f"{detail}, p = {pv:.2e} (fails below {level:.1e})")
          for name, pv, detail in out]


def draw_noise(noise, key, ids, num_samples: int, shape) -> np.ndarray:
  """The unit estimation noise of samples ``0 .. num_samples - 1`` of inputs ``ids``:
  ``[len(ids), num_samples, *shape]`` (``rsjax.sample_noise`` with ``fold_in(key, 1)``,
  in one compiled call)."""
  ids = jnp.asarray(np.asarray(ids), jnp.uint32)
  return np.asarray(_draw(noise, key, ids, num_samples=int(num_samples),
                          shape=tuple(int(d) for d in shape)))


@functools.partial(jax.jit, static_argnames=("noise", "num_samples", "shape"))
def _draw(noise, key, ids, *, num_samples, shape):
  j = jnp.arange(num_samples, dtype=jnp.uint32)
  k_est = jax.random.fold_in(key, 1)
  return jax.vmap(lambda i: sample_noise(noise, k_est, i, j, shape))(ids)


# ----------------------------------------------------------------------------- audit


def _namespace(run: dict, *, path, model_dir, data_dir, torch_checkpoint):
  """The ``rsjax certify`` arguments of a run record (flags missing there at their defaults)."""
  if run.get("command") != "certify":
    raise AuditError(f"{os.fspath(path)!r} was not written by 'rsjax certify' (its run record "
                     "has no certify flags); verify it with 'rsjax verify'")
  ns = launch.flags.certify_defaults(os.fspath(path))
  known = vars(ns)
  for k, v in run.items():
    if k in known:
      setattr(ns, k, tuple(v) if isinstance(v, list) else v)
  chains = ((run.get("certificate") or {}).get("details") or {}).get("chains")
  if chains is not None:  # SRS: the number of chains (--batch) changes the counts
    ns.batch = chains
  ns.model_dir, ns.data_dir, ns.torch_checkpoint = model_dir, data_dir, torch_checkpoint
  ns.quiet = True
  return ns


#: Relative tolerance of a method's own float record fields drawn again (DDRS's and
#: IDRS's sigma): rsjax's reproducibility contract for floats (the golden test's).
#: The per-input sigma of DDRS comes from a batched ascent, so it may move by an ulp
#: when the rows are drawn again in other batches than the run's; counts compare exactly.
FLOAT_RTOL = 1e-5


def _same(again, recorded) -> bool:
  if isinstance(again, float) and isinstance(recorded, (int, float)):
    return math.isclose(again, recorded, rel_tol=FLOAT_RTOL, abs_tol=0.0)
  return again == recorded


def audit(path, *, model_dir=None, rows: int = 20, seed: int = 0, false_alarm: float = 1e-3,
          noise_values: int = 200_000, data_dir=None, torch_checkpoint=None) -> AuditReport:
  """Audits a ``rsjax certify`` run with its model (module docstring).

  Args:
    path: the certify result file (with its ``.run.json`` and ``.cert.jsonl``).
    model_dir: the model directory the run certified.
    rows: how many rows to draw again (chosen at random among the file's; all
      when the file has fewer).
    seed: seed of the choice of rows.
    false_alarm: the false-alarm rate of the noise tests.
    noise_values: about how many noise values the tests use.
    data_dir: TFDS ``data_dir`` of the dataset, if it needs one.
    torch_checkpoint: the PyTorch checkpoint the run certified, instead of
      ``model_dir``.

  Returns:
    An :class:`AuditReport`.

  Raises:
    AuditError: the run cannot be audited (no certificate record, not a
      ``rsjax certify`` run, ...).
  """
  from rsjax import runner
  p = os.fspath(path)
  if not 0 < false_alarm < 1:
    raise AuditError(f"false_alarm must lie in (0, 1), got {false_alarm}")
  if rows < 1:
    raise AuditError(f"rows must be >= 1, got {rows}")
  checks: list[Check] = []
  try:
    report = verify_lib.verify(p, data_dir=data_dir)
  except verify_lib.VerifyError as e:
    raise AuditError(str(e)) from None
  checks.append(Check("radii from counts", report.ok,
                      f"all {report.rows} rows match" if report.ok else
                      f"{len(report.mismatches)} mismatches, first: {report.mismatches[0]}"))
  run = io.read_run_record(p)
  cert = run["certificate"]
  ns = _namespace(run, path=p, model_dir=model_dir, data_dir=data_dir,
                  torch_checkpoint=torch_checkpoint)
  try:
    model, _, ds, apply_fn, params, _, key = launch.sampling_run(ns)
  except launch.CliError as e:
    raise AuditError(str(e)) from None
  fp = runner.fingerprint(params)
  if fp != cert["model"]:
    checks.append(Check("model", False, f"the model's parameters (fingerprint {fp}) are not the "
                        f"run's ({cert['model']}): another checkpoint"))
  else:
    checks.append(Check("model", True, f"fingerprint {fp}"))
  res = io.read_certify(p)
  recs = record_lib.read_records(p)
  pool = np.asarray(sorted(int(i) for i in res.idx if int(i) in recs), np.int64)
  if not len(pool):
    raise AuditError(f"{p!r} has no row with a certificate record")
  rng = np.random.default_rng(seed)
  chosen = np.sort(rng.choice(pool, size=min(rows, len(pool)), replace=False))
  x, _ = ds.get_batch(chosen)
  x = np.asarray(x)
  bad_inputs = [int(i) for i, xi in zip(chosen, x)
                if record_lib.input_fingerprint(xi) != recs[int(i)]["input"]]
  checks.append(Check("inputs", not bad_inputs, f"{len(chosen)} inputs have their recorded "
                      "fingerprints" if not bad_inputs else f"{len(bad_inputs)} of "
                      f"{len(chosen)} inputs differ from the recorded ones (first idx "
                      f"{bad_inputs[0]})"))
  plan = launch.method_plan(ns, key, model, apply_fn, params, ds)
  per_call = plan.inputs_per_call or runner.default_inputs_per_call(ns.N)
  differ = []
  for s in range(0, len(chosen), per_call):
    ids = chosen[s:s + per_call]
    c = plan.certify_fn(x[s:s + per_call], ids)
    for j, i in enumerate(ids):
      again = record_lib.row(c, j, x[s + j], n=ns.N)
      own = plan.record(c, j) if plan.record is not None else {}
      again.update(own)
      r = recs[int(i)]
      for field in ("counts0", "counts", "n", *sorted(own)):
        if not _same(again[field], r.get(field)):
          differ.append((int(i), field, r.get(field), again[field]))
          break
  if differ:
    i, field, was, now = differ[0]
    what = {"counts0": "selection counts", "counts": "estimation counts",
            "n": "samples"}.get(field, field)
    checks.append(Check("counts", False, f"{len(differ)} of {len(chosen)} rows drawn again give "
                        f"other counts (first idx {i}: {what} {was} recorded, {now} drawn)"))
  else:
    checks.append(Check("counts", True, f"{len(chosen)} rows drawn again give the recorded "
                        "counts exactly"))
  noise = launch.sampling(ns).noise
  shape = tuple(cert["input_shape"])
  dim = int(np.prod(shape))
  m = max(2, math.ceil(noise_values / (len(chosen) * dim)))
  eps = draw_noise(noise, key, chosen, m, shape)
  checks.extend(noise_tests(noise, eps, false_alarm=false_alarm))
  return AuditReport(p, tuple(int(i) for i in chosen), tuple(checks), false_alarm)
