"""Commands that need no device start without JAX: ``rsjax --version``, ``verify``, ``analyze``
and every ``--help`` (``rsjax --help`` too), each in a fresh interpreter
whose ``sys.modules`` is read after the command ran. (Their start-up time is a benchmark
figure, not a test: ``benchmarks/configs/startup.py``.)"""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_PROBE = """
import contextlib, io, json, sys
argv = json.loads(sys.argv[1])
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
  from rsjax.app.cli import main
  try:
    status = main(argv)
  except SystemExit as e:
    status = e.code
print(json.dumps({
  "status": status, "jax": "jax" in sys.modules, "flax": "flax" in sys.modules,
  "scipy": "scipy" in sys.modules,
}))
"""

JAX_FREE_COMMANDS = [
  ["--version"],
  ["--help"],
  ["train", "--help"],
  ["verify", "--help"],
  ["analyze", "--help"],
  ["certify", "--help"],
  ["predict", "--help"],
  ["recertify", "--help"],
  ["audit", "--help"],
  ["bench", "--help"],
  ["convert", "--help"],
  ["demo", "--help"],
  ["train-denoiser", "--help"],
]


def imports_of(argv, cwd):
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  # The rsjax of this checkout, whatever the environment has installed.
  env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
  out = subprocess.run(
    [sys.executable, "-c", _PROBE, json.dumps(argv)],
    capture_output=True,
    text=True,
    cwd=cwd,
    env=env,
    timeout=1800,  # a hang, not a slow machine
  )
  assert out.returncode == 0, out.stderr
  return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("argv", JAX_FREE_COMMANDS, ids=" ".join)
def test_command_imports_no_jax(argv, tmp_path):
  seen = imports_of(argv, tmp_path)
  assert seen["status"] in (0, None)
  assert not seen["jax"] and not seen["flax"]


# Start-up that needs no statistics pays no SciPy (1 to 2 s): rsjax.claims, rsjax.stats and
# the methods' checks import it on first use (rsjax._lazy.module).
SCIPY_FREE_COMMANDS = [
  ["--version"],
  ["--help"],
  ["train", "--help"],
  ["certify", "--help"],
  ["verify", "--help"],
  ["analyze", "--help"],
]


@pytest.mark.parametrize("argv", SCIPY_FREE_COMMANDS, ids=" ".join)
def test_help_imports_no_scipy(argv, tmp_path):
  seen = imports_of(argv, tmp_path)
  assert seen["status"] in (0, None)
  assert not seen["scipy"]


RUN = os.path.join(os.path.dirname(__file__), "..", "results", "acr_study_quick", "gaussian.tsv")


def test_verify_and_analyze_of_a_run_import_no_jax(tmp_path):
  run = os.path.abspath(RUN)
  for argv in (["verify", run], ["analyze", run]):
    seen = imports_of(argv, tmp_path)
    assert seen["status"] == 0 and not seen["jax"], argv
