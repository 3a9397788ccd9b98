"""The benchmarks as configs (issue 55, item 2): ``python -m benchmarks.run --config
benchmarks/configs/X.py``. Every config loads and carries its command in its docstring; a
called config's arguments bind to its function's signature (bound, not run); every section of
benchmarks/RESULTS.md names the config that reproduces it; the harness's overrides, a dry run,
the lease's merge and a bench config end to end at a tiny size."""

import inspect
import json
import pathlib
import re

import pytest

from benchmarks import run

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "benchmarks" / "configs").glob("*.py"))
RESULTS = (ROOT / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(
  "path", [p for p in CONFIGS if "call" in run.load(str(p))[0]], ids=lambda p: p.name
)
def test_a_calls_arguments_are_its_functions(path):
  """Each call's keyword arguments bound to the function's own signature (nothing run)."""
  config, _ = run.load(str(path))
  fn = run.function(config)
  assert fn.__module__ == config["call"].rpartition(".")[0] and fn.__doc__
  for kwargs in run.calls(config):
    inspect.signature(fn).bind(**kwargs)


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


def test_overrides_calls_and_a_dry_run(capsys):
  config = {"args": {"streams": 2000}, "json": "x.json"}
  run.override(config, "args.streams=50")
  run.override(config, "args.models=lenet,mlp")
  run.override(config, 'args.fields={"a": 1}')
  assert config["args"] == {"streams": 50, "models": "lenet,mlp", "fields": {"a": 1}}
  runs = run.calls({"args": [{"n": 1, "json": "a.json"}, {"n": 2}], "json": "b.json"})
  assert runs == [{"n": 1, "json": "a.json"}, {"n": 2, "json": "b.json"}]
  assert run.calls({"args": {"n": 1}, "json": "b.json", "json_arg": None}) == [{"n": 1}]
  argv = ["--config", "benchmarks/configs/streams.py", "--set", "args.streams=7", "--dry-run"]
  assert run.main(argv) == []
  assert 'benchmarks.streams.simulate(**{"streams": 7' in capsys.readouterr().out
  with pytest.raises(TypeError):  # a name the function does not take fails before any run
    run.main(["--config", "benchmarks/configs/streams.py", "--set", "args.nope=1", "--dry-run"])


def test_the_lease_merge_reads_its_stages(tmp_path):
  (tmp_path / "a.json").write_text('{"rows": [1]}')
  (tmp_path / "env.json").write_text('{"cores": 2}')
  lines = [{"stage": "a", "status": "ok", "json": "a.json"}, {"stage": "b", "status": "skipped"}]
  (tmp_path / "stages.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
  merged = run.main(["--lease-merge", str(tmp_path)])
  assert merged["env"] == {"cores": 2} and merged["stages"][0]["data"] == {"rows": [1]}
  assert json.loads((tmp_path / "gpu.json").read_text())["stages"][1]["status"] == "skipped"


@pytest.mark.heavy
def test_a_bench_config_runs_end_to_end(tmp_path, capsys):
  """The layout config at a tiny N: both arms through rsjax.app.bench, the NCHW port with its
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
