"""Smoke test of experiments/: each script imports, its get_config works, its results exist.

The experiments themselves take minutes to hours; they are not run here.
"""

import dataclasses
import importlib.util
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(
  0, os.path.join(ROOT, "experiments")
)  # as `python experiments/x.py` has it: for _common
SCRIPTS = sorted(
  f[:-3]
  for f in os.listdir(os.path.join(ROOT, "experiments"))
  if f.endswith(".py") and not f.startswith("_")
)


def _load(name):
  spec = importlib.util.spec_from_file_location(
    f"experiments_{name}", os.path.join(ROOT, "experiments", f"{name}.py")
  )
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module  # dataclasses look their module up there
  spec.loader.exec_module(module)
  return module


def test_there_are_experiments():
  assert {"idrs_table1", "srs_deq"} <= set(SCRIPTS)


@pytest.mark.parametrize("name", SCRIPTS)
def test_script_has_config_command_numbers_and_one_results_dir(name):
  module = _load(name)
  quick, full = module.get_config(True), module.get_config(False)
  assert dataclasses.is_dataclass(quick) and dataclasses.is_dataclass(full)
  assert type(quick) is type(full)
  assert f"python experiments/{name}.py" in module.get_config.__doc__
  assert "Numbers produced" in module.__doc__
  # Everything goes to the repository's one results/ directory.
  assert os.path.samefile(module.RESULTS, os.path.join(ROOT, "results"))
  assert "experiments/results" not in module.__doc__
  assert callable(module.run) and callable(module.main)


def test_recorded_results_are_in_results_dir():
  have = set(os.listdir(os.path.join(ROOT, "results")))
  for name in (
    "idrs_table1.json",
    "idrs_numerics.json",
    "idrs_toy.json",
    "idrs_mnist.json",
    "srs_deq_quick.json",
  ):
    assert name in have
  assert not os.path.exists(os.path.join(ROOT, "experiments", "results"))


def test_certify_rows_starts_over_on_rows_of_another_model(tmp_path):

  import _common
  import numpy as np

  from rsjax import Certificate, io, runner
  from rsjax.method import Plan

  xs, labels = np.arange(4, dtype=np.float32)[:, None], np.zeros(4, np.int64)
  calls = []

  def certify_fn(offset):
    def fn(x, ids):
      calls.append(len(ids))
      zeros = np.zeros(len(x))
      return Certificate(
        prediction=np.zeros(len(x), np.int64),
        radius=x[:, 0].astype(float) + offset,
        p_lower=zeros,
        counts=zeros,
      )

    return Plan(fn)

  path = str(tmp_path / "rows.tsv")

  def get_batch(idx):
    return xs[idx], labels[idx]

  for model, offset in (("a", 0.0), ("a", 0.0), ("b", 10.0)):
    _common.certify_rows(
      runner.certify_dataset,
      certify_fn(offset),
      get_batch,
      np.arange(4),
      path,
      inputs_per_call=2,
      progress=False,
      run={"model": model},
    )
  # model a twice: the second call resumes (no calls); model b: every row again, with b's radii
  assert calls == [2, 2, 2, 2]
  np.testing.assert_allclose(io.read_certify(path).radius, xs[:, 0] + 10.0)


def test_committed_checkpoints_name_no_machine_path(tmp_path):
  """Orbax writes the checkpoint's absolute path into ``commit_success.txt``; the results'
  committed checkpoints must not carry it, and ``strip_checkpoint_paths`` takes it out."""
  import _common

  found = []
  for parent, _, files in os.walk(os.path.join(ROOT, "results")):
    if "commit_success.txt" in files:
      with open(os.path.join(parent, "commit_success.txt")) as fh:
        found.append((parent, fh.read()))
  assert found, "the SRS run's models are committed as checkpoints"
  assert [p for p, text in found if "/" in text] == []
  step = tmp_path / "checkpoints" / "20" / "meta"
  step.mkdir(parents=True)
  (step / "commit_success.txt").write_text(f"Checkpoint commit was successful to {step}")
  (step.parent / "commit_success.txt").write_text("Checkpoint commit was successful")
  assert _common.strip_checkpoint_paths(str(tmp_path)) == 1
  assert (step / "commit_success.txt").read_text() == "Checkpoint commit was successful"
