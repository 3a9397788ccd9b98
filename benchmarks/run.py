"""One benchmark of ``benchmarks/RESULTS.md`` from its config: ``python -m benchmarks.run
--config benchmarks/configs/X.py``.

A config (big_vision's habit) is a Python file whose ``get_config()`` returns a dict, and whose
docstring carries the command and the figure it produced. It declares:

* ``workload``: what is measured (models, N, images, sizes);
* ``arms``: what is compared on it, side by side in one process;
* ``measures``: the figures written, and ``json``: the file they go to;
* and how it runs, one of:

  - ``"bench"``: every arm is a model for ``rsjax bench``'s harness (``rsjax.bench.bench``:
    compile apart, samples per second, seconds per image at N, memory, FLOPs, MFU, the bound,
    the PyTorch twin, the NCHW advice), built by the config's ``target(arm)``;
  - ``"script"``: a module of ``benchmarks/`` (a simulator, a suite) whose ``main(argv)``
    runs the workload, with ``args`` as its flags (``{"streams": 2000}`` -> ``--streams 2000``;
    True -> the bare flag; a list of such dicts: one run each), ``json`` passed as
    ``--json`` (``json_flag`` names another flag, None none).

``--set KEY=VALUE`` overrides a field (dotted: ``--set args.streams=200``; the value read as
JSON, else as text); ``--dry-run`` prints what would run. A bench run records the machine once
(``rsjax.bench.machine.environment``), under ``"machine"`` of its JSON; a script records its own
environment in its JSON, and ``--machine-record`` adds rsjax's record beside it
(``<json>.machine.json``).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import shlex
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["load", "main", "override", "script_argv", "script_runs"]


def load(path: str) -> tuple[dict[str, Any], Any]:
  """``(config, module)`` of the config file at ``path``."""
  name = "benchmarks_config_" + os.path.splitext(os.path.basename(path))[0]
  spec = importlib.util.spec_from_file_location(name, path)
  if spec is None or spec.loader is None:
    raise SystemExit(f"--config {path}: not a Python file")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  config = module.get_config()
  for key in ("workload", "arms", "measures", "json"):
    if key not in config:
      raise SystemExit(f"--config {path}: get_config() has no {key!r}")
  if ("script" in config) == ("bench" in config):
    raise SystemExit(f"--config {path}: give one of 'script' and 'bench'")
  return config, module


def _value(text: str) -> Any:
  try:
    return json.loads(text)
  except json.JSONDecodeError:
    return text


def override(config: dict[str, Any], assignment: str) -> None:
  """Applies ``KEY=VALUE`` (dotted key) to ``config`` in place."""
  key, sep, text = assignment.partition("=")
  if not sep:
    raise SystemExit(f"--set {assignment!r}: expected KEY=VALUE")
  *path, last = key.split(".")
  node = config
  for part in path:
    node = node.setdefault(part, {})
  node[last] = _value(text)


def script_argv(args: dict[str, Any], json_path: str | None, json_flag: str | None) -> list[str]:
  """A script's flags: ``{"n_max": 5, "quick": True, "x": None, "shares": [0.6, 0.7]}`` ->
  ``--n-max 5 --quick --shares 0.6 0.7``; ``json_path`` as ``json_flag`` (None: not passed)."""
  argv = []
  out = {} if json_flag is None or json_path is None else {json_flag: json_path}
  for name, value in {**args, **out}.items():
    flag = "--" + name.replace("_", "-")
    if value is True:
      argv.append(flag)
    elif isinstance(value, list):
      argv += [flag, *map(str, value)]
    elif value is not None and value is not False:
      argv += [flag, str(value)]
  return argv


def script_runs(config: dict[str, Any]) -> list[list[str]]:
  """The argv of each run of the config's script: ``args`` is one dict of flags, or a list of
  them (several runs, each may name its own ``json``)."""
  runs = config["args"] if isinstance(config["args"], list) else [config["args"]]
  flag = config.get("json_flag", "json")
  return [
    script_argv({k: v for k, v in r.items() if k != "json"}, r.get("json", config["json"]), flag)
    for r in runs
  ]


def _run_script(config: dict[str, Any], dry: bool) -> list[Any]:
  out = []
  for argv in script_runs(config):
    print(f"python -m {config['script']} {shlex.join(argv)}", flush=True)
    if not dry:
      out.append(importlib.import_module(config["script"]).main(argv))
  return out


def _run_bench(config: dict[str, Any], module: Any, dry: bool) -> dict[str, Any] | None:
  """Each arm through ``rsjax.bench.bench`` (in order, one process); one JSON of them all."""
  from rsjax.bench import Request, bench, machine, report

  request = Request(**config["bench"])
  print(f"rsjax.bench: {request}; arms {[a['name'] for a in config['arms']]}", flush=True)
  if dry:
    return None
  target: Callable[[dict[str, Any]], Any] = module.target
  arms = []
  for arm in config["arms"]:
    doc = bench(target(arm), request, log=lambda s: print(f"  {s}", flush=True))
    doc.pop("machine")
    print("\n".join(report.lines({**doc, "machine": machine.environment()})), flush=True)
    arms.append({"arm": arm, **doc})
  return {"arms": arms, "machine": machine.environment()}


def main(argv: list[str] | None = None) -> Any:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--config", required=True, help="benchmarks/configs/X.py")
  ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
  ap.add_argument("--dry-run", action="store_true", help="print what would run")
  ap.add_argument("--machine-record", action="store_true", help="write <json>.machine.json")
  args = ap.parse_args(argv)
  config, module = load(args.config)
  for assignment in args.set:
    override(config, assignment)
  if "script" in config:
    out = _run_script(config, args.dry_run)
    if args.machine_record and not args.dry_run:
      from rsjax.bench import machine, report

      report.write_json(config["json"] + ".machine.json", machine.environment())
    return out
  doc = _run_bench(config, module, args.dry_run)
  if doc is not None:
    from rsjax.bench import report

    doc["command"] = shlex.join(["python", "-m", "benchmarks.run", *sys.argv[1:]])
    print(f"json: {report.write_json(config['json'], doc)}")
  return doc


if __name__ == "__main__":
  main()
