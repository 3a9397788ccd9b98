"""The benchmarks as configs (issue 55, item 2): ``python -m benchmarks.run --config
benchmarks/configs/X.py``. Every config loads and carries its command in its docstring; a
script's flags are the ones the script parses (parsed, not run); every section of
benchmarks/RESULTS.md names the config that reproduces it; the harness's flags, overrides and
a bench config end to end at a tiny size."""

import argparse
import importlib
import json
import pathlib
import re

import pytest

from benchmarks import run

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "benchmarks" / "configs").glob("*.py"))
RESULTS = (ROOT / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")


class _Parsed(Exception):
  pass


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_a_config_loads_and_states_its_command(path):
  config, module = run.load(str(path))
  assert f"--config benchmarks/configs/{path.name}" in (module.__doc__ or "")
  assert "Figure" in module.__doc__
  assert config["workload"] and config["arms"] and config["measures"]
  if "bench" in config:
    assert callable(module.target)


@pytest.mark.parametrize(
  "path", [p for p in CONFIGS if "script" in run.load(str(p))[0]], ids=lambda p: p.name
)
def test_a_scripts_flags_are_its_own(path, monkeypatch):
  """Each run's argv parsed by the script's own parser, stopped right after the parse."""
  config, _ = run.load(str(path))
  real = argparse.ArgumentParser.parse_args

  def parse_then_stop(self, args=None, namespace=None):
    raise _Parsed(real(self, args, namespace))

  monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
  main = importlib.import_module(config["script"]).main
  for argv in run.script_runs(config):
    with pytest.raises(_Parsed):
      main(argv)


def _sections():
  return re.split(r"^(?=## )", RESULTS, flags=re.M)[1:]


def test_every_results_section_names_its_config():
  named = set()
  for section in _sections():
    heading = section.splitlines()[0]
    if heading.startswith("## Machine and versions"):
      continue  # the machines of the sections below, no figure
    configs = re.findall(r"benchmarks/configs/(\w+\.py)", section)
    if not configs:
      assert "Config: none." in section, f"{heading}: names no config"
      continue
    named.update(configs)
    for name in configs:
      assert (ROOT / "benchmarks" / "configs" / name).is_file(), f"{heading}: {name}"
  assert named == {p.name for p in CONFIGS}  # and every config reproduces a section


def test_flags_and_overrides():
  argv = run.script_argv(
    {"n_max": 5, "quick": True, "skip": None, "off": False, "shares": [0.6, 0.7]}, "o.json", "json"
  )
  assert argv == ["--n-max", "5", "--quick", "--shares", "0.6", "0.7", "--json", "o.json"]
  assert run.script_argv({"a": 1}, "o.json", None) == ["--a", "1"]
  config = {"args": {"streams": 2000}, "json": "x.json"}
  run.override(config, "args.streams=50")
  run.override(config, "args.models=lenet,mlp")
  assert config["args"] == {"streams": 50, "models": "lenet,mlp"}
  runs = run.script_runs({"args": [{"n": 1, "json": "a.json"}, {"n": 2}], "json": "b.json"})
  assert runs == [["--n", "1", "--json", "a.json"], ["--n", "2", "--json", "b.json"]]


def test_a_bench_config_runs_end_to_end(tmp_path, capsys):
  """The layout config at a tiny N: both arms through rsjax.bench, the NCHW port with its
  channels-last figure (no timing asserted), one machine record."""
  out = tmp_path / "nchw.json"
  sets = ["bench.target_n=60", "bench.n0=8", "bench.images=1", "bench.batch=32", f"json={out}"]
  argv = ["--config", "benchmarks/configs/lenet_nchw.py", *[a for s in sets for a in ("--set", s)]]
  run.main(argv)
  doc = json.loads(out.read_text())
  port, ours = doc["arms"]
  assert port["layout"]["convs"] == {"NCHW": 2} and port["layout"]["channels_last_s"] > 0
  assert ours["layout"] is None and ours["results"][0]["measured_n"] == 60
  assert doc["machine"]["cores"] > 0 and "machine" not in port
  assert "advice: 2 of the model's convolutions are channels-first" in capsys.readouterr().out
