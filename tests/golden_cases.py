"""Golden outputs of every public certify path (fixed keys, tiny models, small n).

``tests/test_golden.py`` compares these cases with ``tests/golden.npz`` by the
reproducibility contract (docs/guides/reproducibility.md): integers (counts,
predictions, abstentions, selection counts) exactly, floats within
``FLOAT_RTOL`` / ``FLOAT_ATOL``, and the solver residual diagnostics within
``RESIDUAL_RTOL``. The file was recorded from the code before the certify
pipeline was refactored (issue 11); its ``meta/platform`` entry names the
machine it was made on.

Regenerate only when a change is *meant* to change results:

    python tests/golden_cases.py

Check this machine against the file (exit 1 and the mismatches on failure):

    python tests/golden_cases.py --check

``--check --save PATH`` also writes this machine's outputs, and ``--compare A B``
compares two such files by the same contract (``.ci/run`` compares its
Python 3.11 and 3.12 environments so).

Both force 4 CPU devices, as the test suite does (counts do not depend on the
device count anyway); ``XLA_FLAGS=--xla_cpu_max_isa=AVX2`` caps XLA:CPU's
instruction set, one cheap stand-in for another machine.
"""

from __future__ import annotations

import dataclasses
import os
import sys

if __name__ == "__main__":
  os.environ.setdefault("JAX_PLATFORMS", "cpu")
  os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
  ).strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden.npz")
#: Floats (radii, p_lower, sigmas, objectives) agree to this relative tolerance across
#: machines: the float32 values computed on the device (DDRS's sigma and objective,
#: IDRS's slack) move by a few ulp with the instruction set (measured: at most 4.6e-6
#: relative, DDRS's objective, on an AMD EPYC with AVX-512 and capped at AVX2 or SSE4.2).
FLOAT_RTOL = 1e-5
FLOAT_ATOL = 1e-7
#: SRS's solver residuals are float32 diagnostics of an unconverged solve, not part of
#: the certificate; their last digits follow XLA's summation order.
RESIDUAL_RTOL = 1e-3
PLATFORM_KEY = "meta/platform"
SHAPE = (4, 4, 1)
C = 3


def mlp_apply(params, x):
  """Tiny MLP on flattened inputs: ``[b, *SHAPE] -> [b, C]``."""
  h = jnp.tanh(x.reshape(x.shape[0], -1) @ params["w1"] + params["b1"])
  return h @ params["w2"] + params["b2"]


def linear_apply(params, x):
  """Binary linear classifier ``[-z, z]``, ``z = w.x + b``."""
  z = x.reshape(x.shape[0], -1) @ params["w"] + params["b"]
  return jnp.stack([-z, z], axis=-1)


@dataclasses.dataclass(frozen=True)
class LinearDEQ:
  """Toy DEQ ``z = A z + W x``, logits ``[0, v.z + b]`` (also used by test_deq_srs).

  Its fixed point is linear in x, so the converged DEQ is the linear classifier
  ``sign(w.x + b)``, ``w = W^T (I - A)^-T v``.
  """

  def __call__(self, params, x, z0, solver):
    from rsjax import models

    u = x.reshape(x.shape[0], -1) @ params["W"].T
    z0 = jnp.zeros_like(u) if z0 is None else z0
    res = models.solve(lambda z: z @ params["A"].T + u, z0, solver)
    score = res.z @ params["v"] + params["b"]
    return jnp.stack([jnp.zeros_like(score), score], axis=-1), res


def _problem():
  rng = np.random.default_rng(11)
  d = int(np.prod(SHAPE))
  mlp = {
    "w1": rng.normal(size=(d, 8)).astype(np.float32),
    "b1": rng.normal(size=8).astype(np.float32) * 0.1,
    "w2": rng.normal(size=(8, C)).astype(np.float32),
    "b2": np.zeros(C, np.float32),
  }
  lin = {"w": rng.normal(size=d).astype(np.float32), "b": np.float32(0.05)}
  x = rng.uniform(0, 1, size=(5,) + SHAPE).astype(np.float32)
  sig_b = np.array([0.2, 0.3, 0.25, 0.5, 0.15], np.float32)
  sig_d = rng.uniform(0.1, 0.4, size=(5,) + SHAPE).astype(np.float32)
  train = rng.uniform(0, 1, size=(30,) + SHAPE).astype(np.float32)
  dq = 6
  q, _ = np.linalg.qr(rng.normal(size=(dq, dq)))
  deq_params = {
    "A": ((q * np.linspace(0, 0.8, dq)) @ q.T).astype(np.float32),
    "W": rng.normal(size=(dq, 3)).astype(np.float32),
    "v": rng.normal(size=dq).astype(np.float32),
    "b": np.float32(0.0),
  }
  x_deq = rng.uniform(0, 1, size=(3, 3)).astype(np.float32)
  return mlp, lin, x, sig_b, sig_d, train, deq_params, x_deq


def _cert(prefix, cert, out):
  out[prefix + "/prediction"] = np.asarray(cert.prediction)
  out[prefix + "/radius"] = np.asarray(cert.radius)
  out[prefix + "/p_lower"] = np.asarray(cert.p_lower)
  out[prefix + "/counts"] = np.asarray(cert.counts)
  if cert.counts_selection is not None:
    out[prefix + "/counts_selection"] = np.asarray(cert.counts_selection)
  for extra in (
    "normalized_radius",
    "alm",
    "sigma",
    "slack",
    "prediction_mc",
    "radius_mc",
    "mismatch_upper",
    "check_selected",
    "check_agree",
    "residual",
    "check_residual",
  ):
    v = getattr(cert, extra, None)
    if v is not None:
      out[f"{prefix}/{extra}"] = np.asarray(v)


def compute() -> dict[str, np.ndarray]:
  """Runs every case and returns ``{name: array}``."""
  import rsjax
  from rsjax import ddrs, idrs, models, srs, ucan

  mlp, lin, x, sig_b, sig_d, train, deq_params, x_deq = _problem()
  out = {}
  small = dict(n0=20, n=400, alpha=0.01, batch_size=64)
  ids = np.array([3, 9, 1, 40, 7])

  # The cases share sample sizes, shapes and models where they can, so that the
  # engine compiles few programs (this test must stay fast).
  # rsjax.sample_counts: every noise and sigma shape.
  for noise in ("gaussian", "laplace", "uniform"):
    for name, sig in (("scalar", 0.3), ("input", sig_b), ("dim", sig_d)):
      out[f"counts/{noise}/{name}"] = rsjax.sample_counts(
        jax.random.key(1),
        mlp_apply,
        mlp,
        x,
        sigma=sig,
        num_classes=C,
        num=400,
        batch_size=64,
        ids=ids,
        noise=noise,
      )
  out["counts/bf16"] = rsjax.sample_counts(
    2,
    mlp_apply,
    mlp,
    x,
    sigma=0.3,
    num_classes=C,
    num=400,
    batch_size=64,
    compute_dtype=jnp.bfloat16,
  )

  # rsjax.certify / predict.
  for noise in ("gaussian", "laplace", "uniform"):
    _cert(
      f"certify/{noise}",
      rsjax.certify(
        jax.random.key(3),
        mlp_apply,
        mlp,
        x,
        sigma=0.4,
        num_classes=C,
        noise=noise,
        ids=ids,
        **small,
      ),
      out,
    )
  _cert(
    "certify/multiclass",
    rsjax.certify(
      jax.random.key(4), mlp_apply, mlp, x, sigma=sig_b, num_classes=C, multiclass=True, **small
    ),
    out,
  )
  _cert(
    "certify/per_dim", rsjax.certify(5, mlp_apply, mlp, x, sigma=sig_d, num_classes=C, **small), out
  )
  _cert(
    "certify/linear", rsjax.certify(6, linear_apply, lin, x, sigma=0.5, num_classes=2, **small), out
  )
  out["predict/gaussian"] = rsjax.predict(
    jax.random.key(7), mlp_apply, mlp, x, sigma=0.3, num_classes=C, n=400, alpha=0.01, batch_size=64
  )
  out["predict/laplace"] = rsjax.predict(
    8,
    mlp_apply,
    mlp,
    x,
    sigma=sig_b,
    num_classes=C,
    n=400,
    alpha=0.05,
    batch_size=64,
    noise="laplace",
    ids=ids,
  )

  # rsjax.idrs.
  _cert(
    "idrs/constant",
    idrs.certify(9, mlp_apply, mlp, x, design=idrs.ConstantSigma(0.3), num_classes=C, **small),
    out,
  )
  knn = idrs.KnnSigma(train, 0.3, 0.05, k=3, m=1.0)
  _cert(
    "idrs/knn",
    idrs.certify(10, linear_apply, lin, x, design=knn, num_classes=2, ids=ids, **small),
    out,
  )

  # rsjax.ucan (UCAN).
  pat = ucan.pattern_sigma(SHAPE, pattern="l2") * 0.3
  _cert(
    "ucan/pattern",
    ucan.certify(11, mlp_apply, mlp, x, sigma=pat, num_classes=C, **small),
    out,
  )
  _cert(
    "ucan/mu",
    ucan.certify(
      12,
      mlp_apply,
      mlp,
      x,
      sigma=sig_d,
      mu=0.05 * sig_d,
      num_classes=C,
      noise="laplace",
      ids=ids,
      **small,
    ),
    out,
  )
  unsound = ucan.InputDependentNoise(lambda x: (None, sig_d))  # rate inf
  _cert(
    "ucan/unsound",
    ucan.certify(
      13,
      mlp_apply,
      mlp,
      x,
      sigma=unsound,
      num_classes=C,
      allow_unsound=True,
      multiclass=True,
      **small,
    ),
    out,
  )

  # rsjax.ddrs.
  opt = ddrs.optimize_sigma(14, mlp_apply, mlp, x, sigma0=0.25, steps=5, lr=0.05, num_samples=4)
  out["ddrs/sigma"] = opt
  out["ddrs/objective"] = ddrs.smoothing_objective(15, mlp_apply, mlp, x, sigma=opt, num_samples=4)
  _cert("ddrs/plain", ddrs.certify(16, mlp_apply, mlp, x, sigma=opt, num_classes=C, **small), out)
  mem = ddrs.MemoryCertifier()
  for i, order in enumerate((np.arange(5), np.array([4, 0, 3, 1, 2]))):
    _cert(
      f"ddrs/memory{i}",
      ddrs.certify(
        17 + i,
        linear_apply,
        lin,
        x[order] + 0.01 * i,
        sigma=opt[order] * 2,
        num_classes=2,
        memory=mem,
        ids=order,
        **small,
      ),
      out,
    )

  # rsjax.srs: standard RS and SRS (the paper's bound and the authors' code's).
  deq_fn = LinearDEQ()
  dsmall = dict(n0=16, n=200, alpha=0.05)
  _cert(
    "deq/standard",
    srs.certify(
      19,
      deq_fn,
      deq_params,
      x_deq,
      sigma=0.3,
      num_classes=2,
      method="standard",
      solver=models.SolverConfig(steps=20),
      batch_size=64,
      **dsmall,
    ),
    out,
  )
  srs_cfg = srs.SRSConfig(
    solver=models.SolverConfig(steps=2),
    warmup=models.SolverConfig(steps=8),
    check_solver=models.SolverConfig(steps=20),
    m=40,
  )
  srs_kw = dict(num_classes=2, method="srs", batch_size=32, **dsmall)
  _cert(
    "deq/srs",
    srs.certify(20, deq_fn, deq_params, x_deq, sigma=[0.2, 0.3, 0.4], srs=srs_cfg, **srs_kw),
    out,
  )
  _cert(
    "deq/srs_code",
    srs.certify(
      21,
      deq_fn,
      deq_params,
      x_deq,
      sigma=0.3,
      srs=srs_cfg.replace(correction="authors_code"),
      **srs_kw,
    ),
    out,
  )
  return out


def platform() -> str:
  """The machine the results are computed on, in words (stored in the golden file)."""
  import platform as platform_lib

  import jaxlib

  cpu = platform_lib.processor() or platform_lib.machine()
  try:
    with open("/proc/cpuinfo") as f:
      cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
  except (OSError, StopIteration):
    pass
  dev = jax.devices()[0]
  return (
    f"{dev.platform} ({getattr(dev, 'device_kind', '')}), {platform_lib.machine()} {cpu}, "
    f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, "
    f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}"
  )


def load(path: str = GOLDEN) -> tuple[dict[str, np.ndarray], str]:
  """The recorded golden arrays and the platform they were made on.

  Args:
    path: a file written by this module (default: the committed ``golden.npz``).
  """
  with np.load(path) as golden:
    expected = {k: golden[k] for k in golden.files}
  made_on = str(expected.pop(PLATFORM_KEY, "unrecorded"))
  return expected, made_on


def mismatches(results: dict, expected: dict[str, np.ndarray]) -> list[str]:
  """The names (with a reason) where ``results`` break the contract with ``expected``."""
  bad = []
  if sorted(results) != sorted(expected):
    bad.append(f"case names differ: {sorted(set(results) ^ set(expected))}")
  for name, want in expected.items():
    if name not in results:
      continue
    got = np.asarray(results[name])
    if got.shape != want.shape or got.dtype.kind != want.dtype.kind:
      bad.append(f"{name}: shape/kind {got.shape} {got.dtype} != {want.shape} {want.dtype}")
    elif want.dtype.kind != "f":
      if not np.array_equal(got, want):
        bad.append(f"{name}: integers differ: {got.tolist()} != {want.tolist()}")
    else:
      rtol, atol = (RESIDUAL_RTOL, 1e-8) if name.endswith("residual") else (FLOAT_RTOL, FLOAT_ATOL)
      # NaN where NaN, inf where inf, and the same sign of zero radii.
      if not np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True):
        rel = np.nanmax(np.abs(got - want) / np.maximum(np.abs(want), 1e-30))
        bad.append(f"{name}: floats differ beyond rtol {rtol} (max relative {rel:.3g})")
  return bad


def save(results: dict, path: str) -> None:
  """Writes ``results`` (of :func:`compute`) with this machine's platform to ``path``, as
  ``--check --save`` does, for ``--compare``."""
  np.savez_compressed(path, **results, **{PLATFORM_KEY: np.array(platform())})


def _main(argv: list[str]) -> int:
  """``--check [--save PATH]``, ``--compare A B`` or (no argument) regenerate the file."""
  if argv[:1] == ["--compare"] and len(argv) == 3:
    (a, made_a), (b, made_b) = load(argv[1]), load(argv[2])
    bad = mismatches(a, b)
    ints = sum(v.dtype.kind != "f" for v in b.values())
    print(
      f"golden outputs of\n  {made_a}\n  {made_b}\n"
      + (
        "\n".join(bad)
        or f"are equal: {ints} integer arrays (counts, predictions) exactly, "
        f"{len(b) - ints} float arrays within the contract"
      ),
      file=sys.stderr,
    )
    return 1 if bad else 0
  if argv[:1] == ["--check"] and len(argv) in (1, 3) and argv[1:2] in ([], ["--save"]):
    expected, made_on = load()
    results = compute()
    bad = mismatches(results, expected)
    print(f"golden file made on: {made_on}\nchecked on: {platform()}", file=sys.stderr)
    print("\n".join(bad) or "golden outputs match", file=sys.stderr)
    if len(argv) == 3:  # this machine's outputs, for --compare
      save(results, argv[2])
    return 1 if bad else 0
  if argv:
    print("usage: golden_cases.py [--check [--save PATH] | --compare A B]", file=sys.stderr)
    return 2
  results = compute()
  results[PLATFORM_KEY] = np.array(platform())
  np.savez_compressed(GOLDEN, **results)
  print(
    f"wrote {len(results)} arrays to {GOLDEN} ({os.path.getsize(GOLDEN)} bytes)", file=sys.stderr
  )
  return 0


if __name__ == "__main__":
  sys.exit(_main(sys.argv[1:]))
