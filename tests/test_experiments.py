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


@pytest.mark.parametrize("method", ["cohen", "ddrs"])
def test_certify_run_writes_a_verified_run_and_starts_over_on_another_model(tmp_path, method):
  """``_common.certify_run``: every result file of the experiments is a run through
  ``rsjax.app.launch.run`` that ``rsjax verify`` accepts; a rerun resumes its rows, and rows
  of another model are certified again."""
  import _common

  from rsjax import data, models, verify
  from rsjax.records import io
  from rsjax.records import spec as runspec

  test = data.load("digits", "test")
  config = {"model": "mlp", "num_classes": 10, "input_shape": [8, 8, 1], "dataset": "digits"}
  path = str(tmp_path / "rows.tsv")
  written, fingerprints = [], []
  for seed in (0, 0, 1):  # model a twice, then model b
    workdir = str(tmp_path / f"model_{seed}")
    model = models.create_model("mlp", num_classes=10, input_shape=(8, 8, 1), rngs=seed)
    if not os.path.exists(workdir):
      models.save_model(workdir, model, config)
    report = _common.certify_run(
      path,
      model,
      workdir,
      test,
      sigma=0.25,
      skip=60,
      n0=20,
      n=200,
      alpha=0.01,
      seed=0,
      method=method,
      options={"ddrs_steps": 2, "ddrs_lr": 0.01} if method == "ddrs" else None,
      batch_size=200,
      save_counts=method == "cohen",
    )
    written.append(report.written)
    fingerprints.append(runspec.RunSpec.read(path).model.fingerprint)
    assert len(io.read_certify(path).idx) == 5
    assert report.run.model.path == workdir and report.run.method == method
    assert verify.verify(path).ok
  # model a twice: the second call resumes (no rows); model b: every row again, its run
  assert written == [5, 0, 5]
  assert fingerprints[0] == fingerprints[1] != fingerprints[2]


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


def _result_files(root):
  """Every committed file under ``root`` (results/) that holds certified rows: neither a run's
  record (``.run.json``, ``.cert.jsonl``, its timing ``.seconds.json``, a parent's stored votes
  ``.votes.npz``), nor a summary at the top (JSON, PNG), nor a model (under a ``model/``
  directory)."""
  out = []
  for p in sorted(root.rglob("*")):
    rel = p.relative_to(root)
    if not p.is_file() or "model" in rel.parts[:-1]:
      continue
    if p.name.endswith((".run.json", ".cert.jsonl", ".seconds.json", ".votes.npz")):
      continue
    if len(rel.parts) == 1 and p.suffix in (".json", ".png"):
      continue
    out.append(rel.as_posix())
  return out


def test_every_committed_result_file_verifies():
  """Every certify file under results/ is a complete run ``rsjax verify`` accepts (counts,
  bounds, radii, labels against the dataset, the claim bound into the key)."""
  import pathlib

  from rsjax import verify

  root = pathlib.Path(__file__).resolve().parent.parent / "results"
  files = _result_files(root)
  runs = [f for f in files if f.endswith(".tsv") and (root / (f + ".run.json")).exists()]
  assert sorted(set(files) - set(runs)) == []  # nothing is no run
  assert len(runs) >= 5, runs
  for f in runs:
    report = verify.verify(root / f)
    assert report.ok and report.complete, f"{f}: {report.summary()}"
