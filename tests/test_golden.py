"""Golden outputs of every public certify path, compared by the reproducibility contract.

``tests/golden.npz`` holds the counts, predictions, radii and p_lower of
``tests/golden_cases.py``; any change of an integer there is a change of
results, not a clean-up. Integers are compared exactly, floats within the
contract's tolerance (``golden_cases.FLOAT_RTOL``), since float32 values
computed on the device move by an ulp or two between CPUs.
"""

import os
import subprocess
import sys

import golden_cases
import jax
import numpy as np
import pytest

#: Where the suite also saves this machine's outputs (``--check --save``'s file), when set:
#: CI compares two environments' outputs without computing them a second time.
SAVE_ENV = "RSJAX_GOLDEN_SAVE"


@pytest.fixture(scope="module")
def results():
  out = golden_cases.compute()
  if os.environ.get(SAVE_ENV):
    golden_cases.save(out, os.environ[SAVE_ENV])
  return out


def test_golden_outputs_follow_the_contract(results):
  expected, made_on = golden_cases.load()
  bad = golden_cases.mismatches(results, expected)
  assert not bad, f"golden file made on {made_on}:\n" + "\n".join(bad)


def test_golden_file_records_its_platform():
  _, made_on = golden_cases.load()
  assert "jax" in made_on and made_on != "unrecorded"


def test_contract_catches_a_changed_count_and_a_moved_float(results):
  # The comparison is not a tolerance wide enough to pass anything.
  expected, _ = golden_cases.load()
  moved = dict(results)
  moved["certify/gaussian/counts"] = np.asarray(results["certify/gaussian/counts"]) + np.eye(
    5, 3, dtype=np.int32
  )
  moved["ddrs/sigma"] = np.asarray(results["ddrs/sigma"]) * np.float32(1 + 1e-4)
  bad = golden_cases.mismatches(moved, expected)
  assert any(b.startswith("certify/gaussian/counts") for b in bad)
  assert any(b.startswith("ddrs/sigma") for b in bad)


def test_golden_cases_certify_something(results):
  # The cases are not all abstentions or zero radii (a test that cannot fail).
  radii = [v for k, v in results.items() if k.endswith("/radius")]
  assert sum(int(np.sum(r > 0)) for r in radii) > 20
  assert sum(int(np.sum(r == 0)) for r in radii) > 0


@pytest.mark.slow
@pytest.mark.skipif(
  jax.default_backend() != "cpu" or os.uname().machine not in ("x86_64", "AMD64"),
  reason="XLA:CPU's instruction-set cap applies to x86 CPUs",
)
def test_golden_outputs_under_a_capped_instruction_set():
  # One cheap stand-in for another machine: XLA:CPU limited to AVX2, in a fresh process.
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_cpu_max_isa=AVX2")
  proc = subprocess.run(
    [sys.executable, golden_cases.__file__, "--check"],
    env=env,
    capture_output=True,
    text=True,
    timeout=1800,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "golden outputs match" in proc.stderr
