"""A method defined outside rsjax, registered from outside, through `rsjax certify` and `verify`.

The package below (its ``Method`` value without JAX, and its certifier, the JAX
half, named by the value's string path) is written to a temporary directory
with a ``.dist-info`` whose entry point (group ``rsjax.methods``) names its
``Method`` value, exactly
what ``pip install`` of a package declaring
``[project.entry-points."rsjax.methods"]`` leaves. Nothing in rsjax names it:
``rsjax certify --method toy-capped`` gets its flag and plan from the value,
and ``rsjax verify`` its check.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

TOY = '''
"""Cohen's CERTIFY with the radius capped at --toy-cap (a smaller radius is still sound).

The method's description, without JAX (what ``rsjax verify`` reads); its certifier, the JAX
half, is ``toy_rsjax_method._certify:Capped``, imported when a run is planned.
"""

import numpy as np

from rsjax.claims import cohen_certificate, compare, read_rows, run_sigma
from rsjax.runs.method import Method, Option, Training


def _check(view, res, recs, *, rtol, atol, **_):
  issues = []
  rows = read_rows(view, res, recs, issues)
  predict, radius, p = cohen_certificate(view, rows, run_sigma(view))
  compare(res, rows, predict, radius, issues, rtol=rtol, atol=atol,
          columns=("predict", "uncapped"))
  cap = float(view["settings"]["toy_cap"])
  compare(res, rows, predict, np.minimum(radius, cap), issues, rtol=rtol, atol=atol, p_lower=p)
  return issues


TOY = Method("toy-capped", "Cohen's CERTIFY with the radius capped (a method from outside)",
             "toy_rsjax_method._certify:Capped",
             (Option("toy_cap", 1.0, "the largest radius reported", float, positive=True),),
             check=_check,
             training=Training("toy_rsjax_method._train:train_toy",
                               "Gaussian noise, then a note (a training half from outside)",
                               (Option("toy_note", "none", "a word the trainer prints", str),)))
'''

TOY_TRAIN = '''
"""The training half of toy-capped: Cohen's Gaussian training, and its option in the last line."""

from rsjax.training.job import train_gaussian


def train_toy(job, *, toy_note):
  return f"{train_gaussian(job)} [toy note: {toy_note}]"
'''

TOY_CERTIFY = '''
"""The JAX half of toy-capped: its certifier (an rsjax.methods.Certifier), the value
rsjax.certify(certifier=...) takes too."""

import dataclasses
from typing import ClassVar

import numpy as np

import rsjax
from rsjax.methods import Certifier


@dataclasses.dataclass(frozen=True)
class CappedCertificate(rsjax.Certificate):
  uncapped: np.ndarray | None = None
  columns: ClassVar[tuple[str, ...]] = ("uncapped",)

  def row_fields(self, j):
    return {"uncapped": repr(float(self.uncapped[j]))}


@dataclasses.dataclass(frozen=True)
class Capped(Certifier):
  cap: float = 1.0
  columns: ClassVar[tuple[str, ...]] = CappedCertificate.columns

  @classmethod
  def from_options(cls, ctx, *, toy_cap):
    return cls(toy_cap)

  def describe(self, ctx):
    return f"Cohen's CERTIFY, radius capped at {self.cap}"

  def certify(self, batch):
    c = rsjax.Cohen().certify(batch)
    fields = {f.name: getattr(c, f.name) for f in dataclasses.fields(c)}
    return CappedCertificate(**{**fields, "radius": np.minimum(c.radius, self.cap)},
                             uncapped=c.radius)
'''


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
  """A directory holding the toy package and its installed metadata (entry point)."""
  root = tmp_path_factory.mktemp("plugin")
  (root / "toy_rsjax_method").mkdir()
  (root / "toy_rsjax_method" / "__init__.py").write_text(textwrap.dedent(TOY))
  (root / "toy_rsjax_method" / "_certify.py").write_text(textwrap.dedent(TOY_CERTIFY))
  (root / "toy_rsjax_method" / "_train.py").write_text(textwrap.dedent(TOY_TRAIN))
  info = root / "toy_rsjax_method-0.1.dist-info"
  info.mkdir()
  (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-rsjax-method\nVersion: 0.1\n")
  (info / "entry_points.txt").write_text("[rsjax.methods]\ntoy = toy_rsjax_method:TOY\n")
  return root


def _rsjax(plugin, *args, check=True):
  env = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([str(plugin), *filter(None, [os.environ.get("PYTHONPATH")])]),
  }
  out = subprocess.run(
    [sys.executable, "-m", "rsjax", *map(str, args)],
    env=env,
    capture_output=True,
    text=True,
    timeout=1800,
  )
  if check and out.returncode != 0:
    raise AssertionError(f"rsjax {args[0]} exited {out.returncode}:\n{out.stdout}\n{out.stderr}")
  return out


@pytest.mark.heavy
def test_a_method_from_outside_certifies_and_verifies(trained, plugin, tmp_path):
  out = tmp_path / "toy.tsv"
  _rsjax(
    plugin,
    "certify",
    trained,
    out,
    "--method",
    "toy-capped",
    "--toy-cap",
    "0.2",
    "--N0",
    "50",
    "--N",
    "400",
    "--max",
    "6",
    "--batch",
    "200",
    "--quiet",
  )
  lines = out.read_text().splitlines()
  assert lines[0].split("\t")[-1] == "uncapped" and len(lines) == 7
  rows = [dict(zip(lines[0].split("\t"), line.split("\t"), strict=True)) for line in lines[1:]]
  assert all(float(r["radius"]) == min(float(r["uncapped"]), 0.2) for r in rows)
  assert any(float(r["uncapped"]) > 0.2 for r in rows)  # the cap did something
  run = json.loads((tmp_path / "toy.tsv.run.json").read_text())
  assert run["method"]["name"] == "toy-capped" and run["method"]["options"] == {"toy_cap": 0.2}
  ok = _rsjax(plugin, "verify", out)
  assert "verified: all 6 rows" in ok.stdout and "method toy-capped" in ok.stdout, ok.stdout
  # The plugin's check is what verify runs: a radius over the cap is caught.
  j = next(j for j, r in enumerate(rows) if float(r["uncapped"]) > 0.2)
  names, cells = lines[0].split("\t"), lines[1 + j].split("\t")
  cells[names.index("radius")] = cells[names.index("uncapped")]
  lines[1 + j] = "\t".join(cells)
  out.write_text("\n".join(lines) + "\n")
  bad = _rsjax(plugin, "verify", out, check=False)
  assert bad.returncode == 1 and "radius" in bad.stdout, bad.stdout


@pytest.mark.heavy
def test_a_method_from_outside_trains_with_its_own_options(plugin, tmp_path):
  common = ("--dataset", "digits", "--model", "mlp", "--epochs", "1", "--batch", "64", "--quiet")
  done = _rsjax(
    plugin, "train", *common, "--out", tmp_path / "m", "--method", "toy-capped", "--toy-note", "hi"
  )
  assert "trained mlp on digits at sigma=0.25: epoch 1" in done.stdout, done.stdout
  assert done.stdout.rstrip().endswith("[toy note: hi]"), done.stdout
  assert json.loads((tmp_path / "m" / "config.json").read_text())["model"] == "mlp"
  # its option with another method is refused, naming the method it belongs to
  other = _rsjax(plugin, "train", *common, "--out", tmp_path / "n", "--toy-note", "x", check=False)
  assert other.returncode == 2 and "--toy-note works with --method toy-capped" in other.stderr


def test_without_its_entry_point_the_method_is_unknown(trained, tmp_path):
  out = subprocess.run(
    [
      sys.executable,
      "-m",
      "rsjax",
      "certify",
      str(trained),
      str(tmp_path / "o.tsv"),
      "--method",
      "toy-capped",
    ],
    capture_output=True,
    text=True,
    timeout=1800,
  )
  assert out.returncode == 2 and "toy-capped" in out.stderr
