"""The reproducibility contract (docs/guides/reproducibility.md) on any machine.

* Counts do not depend on the device count: the 1-4 device cases run on virtual
  CPU devices in a fresh process, whatever devices this process has.
* One GPU's counts equal the CPU's at the default precision (skipped without a GPU).
* The precision is declared: it reaches every traced matmul, it is part of a
  run's identity, and a resume at another precision is refused.
"""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rsjax
from rsjax.app import cli
from rsjax.records import io

# Counts of a small MLP and CNN for given devices, printed as JSON; run in a child
# process so that its backend and device count are its own.
_CHILD = textwrap.dedent("""
    import json, sys
    import jax, jax.numpy as jnp, numpy as np
    import rsjax
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(13, 6, 6, 1)).astype(np.float32)
    mlp = {"w1": rng.normal(size=(36, 16)).astype(np.float32) / 6,
           "w2": rng.normal(size=(16, 5)).astype(np.float32)}
    cnn = {"k": rng.normal(size=(3, 3, 1, 4)).astype(np.float32),
           "w": rng.normal(size=(4, 5)).astype(np.float32)}
    def mlp_apply(p, x):
      return jnp.tanh((x.reshape(x.shape[0], -1) - 0.5) @ p["w1"]) @ p["w2"]
    def cnn_apply(p, x):
      y = jax.lax.conv_general_dilated(x, p["k"], (1, 1), "SAME",
                                       dimension_numbers=("NHWC", "HWIO", "NHWC"))
      return (jax.nn.relu(y).mean(axis=(1, 2)) - 1.0) @ p["w"]
    out = {"platform": jax.default_backend(), "devices": len(jax.local_devices())}
    for name, fn, p in (("mlp", mlp_apply, mlp), ("cnn", cnn_apply, cnn)):
      for d in json.loads(sys.argv[1]):
        c = rsjax.sample_counts(7, fn, p, x, sigma=0.5, num_classes=5, num=600,
                                batch_size=128, devices=d)
        out[f"{name}/{d}"] = np.asarray(c).tolist()
    print(json.dumps(out))
""")


def _child_counts(devices, **env):
  environ = dict(os.environ, **env)
  proc = subprocess.run(
    [sys.executable, "-c", _CHILD, json.dumps(devices)],
    env=environ,
    capture_output=True,
    text=True,
    timeout=1800,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


def _cpu_env(num_devices):
  return dict(
    JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={num_devices}"
  )


@pytest.mark.slow
def test_counts_identical_across_device_counts():
  got = _child_counts([1, 2, 3, 4], **_cpu_env(4))
  assert got["platform"] == "cpu" and got["devices"] == 4
  for model in ("mlp", "cnn"):
    ref = np.asarray(got[f"{model}/1"])
    assert ref.sum() == 13 * 600 and (ref > 0).sum() > 13  # noise moves predictions
    for d in (2, 3, 4):
      np.testing.assert_array_equal(np.asarray(got[f"{model}/{d}"]), ref, err_msg=f"{model} {d}")


def _has_gpu_plugin() -> bool:
  return any(
    importlib.util.find_spec(m) is not None
    for m in ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_rocm7_plugin")
  )


@pytest.mark.slow
@pytest.mark.skipif(not _has_gpu_plugin(), reason="no GPU build of jaxlib installed")
def test_gpu_counts_equal_cpu_counts_at_the_default_precision():
  gpu = _child_counts([1], JAX_PLATFORMS="", XLA_FLAGS="")
  if gpu["platform"] not in ("gpu", "cuda", "rocm"):
    pytest.skip(f"no GPU found (default backend {gpu['platform']})")
  cpu = _child_counts([1], **_cpu_env(1))
  for model in ("mlp", "cnn"):
    np.testing.assert_array_equal(gpu[f"{model}/1"], cpu[f"{model}/1"], err_msg=model)


def test_precision_names_resolve_and_conflicts_are_refused():
  assert rsjax.Sampling().precision == "float32"
  assert rsjax.Sampling(precision="bf16").compute_dtype == jnp.bfloat16
  assert rsjax.Sampling(compute_dtype=jnp.bfloat16).precision == "bfloat16"
  assert rsjax.Sampling(precision="tf32").compute_dtype is None
  with pytest.raises(ValueError, match="precision must be one of"):
    rsjax.Sampling(precision="fp8")
  with pytest.raises(ValueError, match="contradicts"):
    rsjax.Sampling(precision="tf32", compute_dtype=jnp.bfloat16)


@pytest.mark.parametrize(
  "precision, matmul, dtype",
  [
    ("float32", "highest", jnp.float32),
    ("tf32", "tensorfloat32", jnp.float32),
    ("bfloat16", "default", jnp.bfloat16),
  ],
)
def test_the_declared_precision_reaches_the_traced_classifier(precision, matmul, dtype):
  # What the classifier sees when the engine traces it: the matmul precision in
  # force and the dtype of its input, for certify's passes and for predict.
  seen = []
  w = jnp.asarray(np.random.default_rng(0).normal(size=(4, 3)), jnp.float32)

  def apply_fn(params, x):
    seen.append((jax.config.jax_default_matmul_precision, x.dtype))
    return x.reshape(x.shape[0], -1) @ params.astype(x.dtype)

  x = np.random.default_rng(1).uniform(size=(2, 4)).astype(np.float32)
  rsjax.certify(
    0, apply_fn, w, x, sigma=0.5, num_classes=3, n0=8, n=16, batch_size=8, precision=precision
  )
  rsjax.predict(
    1, apply_fn, w, x, sigma=0.5, num_classes=3, n=16, batch_size=8, precision=precision
  )
  assert seen and set(seen) == {(matmul, jnp.dtype(dtype))}


def test_bfloat16_is_another_classifier_and_float32_is_the_default(digits256):
  # Same noise, declared precisions: float32 equals the default; bfloat16 is
  # computed differently (its counts are its own, compared in benchmarks/quality.py).
  x, _ = digits256
  rng = np.random.default_rng(2)
  params = {"w": jnp.asarray(rng.normal(size=(64, 10)), jnp.float32)}
  apply_fn = lambda p, x: x.reshape(x.shape[0], -1) @ p["w"]  # noqa: E731
  kw = dict(sigma=0.5, num_classes=10, num=400, batch_size=200)
  default = rsjax.sample_counts(3, apply_fn, params, x[:16], **kw)
  f32 = rsjax.sample_counts(3, apply_fn, params, x[:16], precision="float32", **kw)
  bf16 = rsjax.sample_counts(3, apply_fn, params, x[:16], precision="bfloat16", **kw)
  np.testing.assert_array_equal(default, f32)
  assert bf16.sum() == f32.sum() and not np.array_equal(bf16, f32)


def test_precision_is_in_the_run_identity_and_a_resume_at_another_is_refused(tmp_path, capsys):
  out = tmp_path / "model"
  assert (
    cli.main(
      [
        "train",
        "--dataset",
        "digits",
        "--model",
        "mlp",
        "--sigma",
        "0.25",
        "--epochs",
        "1",
        "--batch",
        "64",
        "--lr",
        "0.1",
        "--out",
        str(out),
        "--quiet",
      ]
    )
    == 0
  )
  tsv = tmp_path / "c.tsv"
  args = [
    "certify",
    str(out),
    str(tsv),
    "--N",
    "100",
    "--N0",
    "20",
    "--skip",
    "200",
    "--batch",
    "100",
    "--quiet",
  ]
  assert cli.main(args) == 0
  assert io.read_run_record(tsv)["sampling"]["precision"] == "float32"
  assert "precision: float32" in capsys.readouterr().out
  assert cli.main(args + ["--precision", "bfloat16"]) == 2
  err = capsys.readouterr().err
  assert "precision 'float32' in the file, 'bfloat16' now" in err
  assert cli.main(args + ["--precision", "float32"]) == 0  # the same run resumes
