"""Test configuration: 4 CPU devices, strict JAX settings, key-reuse checks.

The device count must be set before JAX initializes its backends, so it is done
here at import, before any test module imports jax.
"""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
_flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in _flags:
  os.environ["XLA_FLAGS"] = (_flags + " --xla_force_host_platform_device_count=4").strip()
os.environ.setdefault("MPLBACKEND", "Agg")
# The command's persistent compilation cache (on by default) stays out of the user's
# home during the tests.
os.environ.setdefault("RSJAX_COMPILATION_CACHE", "off")
# So does the kept parse of the bundled datasets (tests/test_data.py tests it in a tmp folder).
os.environ.setdefault("RSJAX_DATA_CACHE", "off")
# The suite is one process even when started inside a cluster job (srun, mpirun): without the
# variables JAX detects jobs by, rsjax.runs.distributed.initialize() joins none. The multi-process
# tests set them for their own child processes.
for _var in (
  "SLURM_JOB_ID",
  "OMPI_MCA_orte_hnp_uri",
  "OMPI_COMM_WORLD_SIZE",
  "TPU_WORKER_HOSTNAMES",
  "TPU_PROCESS_ADDRESSES",
  "TPU_PROCESS_ADDRESSES_PATH",
  "KUBERNETES_SERVICE_HOST",
):
  os.environ.pop(_var, None)

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_debug_key_reuse", True)


@pytest.fixture
def getkey():
  """Returns a function giving a fresh key on each call (seeded, reproducible)."""
  base = jax.random.key(1234)
  counter = iter(range(1 << 30))

  def _next():
    return jax.random.fold_in(base, next(counter))

  return _next


@pytest.fixture(scope="session")
def digits256():
  """The first 256 of scikit-learn's 8x8 digits: ``x`` ``[256, 8, 8, 1]`` in [0, 1] and the
  labels ``y`` ``[256]``."""
  from sklearn.datasets import load_digits

  d = load_digits()
  x = (d.images / 16.0).astype(np.float32)[..., None][:256]
  return x, d.target[:256].astype(np.int32)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  """A small MLP trained on digits by ``rsjax train`` (2 epochs, sigma 0.25), one per test
  module: its model directory."""
  from rsjax.app import cli

  out = tmp_path_factory.mktemp("model") / "mlp_digits"
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
        "2",
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
  return out


def pytest_report_header(config):
  return f"jax {jax.__version__}, devices: {jax.devices()}"
