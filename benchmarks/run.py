"""One benchmark of ``benchmarks/RESULTS.md`` from its config: ``python -m benchmarks.run
--config benchmarks/configs/X.py``.

A config (big_vision's habit) is a Python file whose ``get_config()`` returns a dict, and whose
docstring carries the command and the figure it produced. It declares:

* ``workload``: what is measured (models, N, images, sizes);
* ``arms``: what is compared on it, side by side in one process;
* ``measures``: the figures written, and ``json``: the file they go to;
* and how it runs, one of:

  - ``"bench"``: every arm is a model for ``rsjax bench``'s harness (``rsjax.app.bench.bench``:
    compile apart, samples per second, seconds per image at N, memory, FLOPs, MFU, the bound,
    the PyTorch twin, the NCHW advice), built by the config's ``target(arm)``;
  - ``"call"``: a function of ``benchmarks/`` (``"benchmarks.streams.simulate"``: a
    simulator, a suite, a comparison), called with ``args`` as its keyword arguments (a list
    of such dicts: one call each) and ``json`` as its ``json`` argument (a dict of ``args`` may
    name its own; ``json_arg`` names another argument, None none).

``--set KEY=VALUE`` overrides a field (dotted: ``--set args.streams=200``; the value read as
JSON, else as text); ``--dry-run`` prints each call, its arguments bound to the function's
signature (so a wrong name fails without running anything). The machine is recorded once, by
``rsjax.app.bench.machine.environment`` (under ``"machine"`` of a bench run's JSON; in a called
function's JSON where it writes one; ``--machine-record`` writes it beside ``json`` as
``<json>.machine.json``).

The device lease (``benchmarks/gpu_lease.sh``, a list of these runs) has two steps of its own:
``--lease-env OUT`` writes ``OUT/env.json`` (the machine record, the device's memory statistics
and, where JAX offers it, the attached topology, its ``target_config`` saved for deviceless
compiles) and ``--lease-merge OUT`` rewrites ``OUT/gpu.json`` from ``OUT/stages.jsonl`` (one
line per finished or skipped stage) and each stage's JSON, importing neither JAX nor PyTorch.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import importlib.util
import inspect
import json
import os
import shlex
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["calls", "function", "lease_env", "lease_merge", "load", "main", "override"]


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
  if ("call" in config) == ("bench" in config):
    raise SystemExit(f"--config {path}: give one of 'call' and 'bench'")
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


def function(config: dict[str, Any]) -> Callable[..., Any]:
  """The function a ``"call"`` config names (``"benchmarks.module.function"``)."""
  module, _, name = config["call"].rpartition(".")
  return getattr(importlib.import_module(module), name)


def calls(config: dict[str, Any]) -> list[dict[str, Any]]:
  """The keyword arguments of each call: ``args`` is one dict, or a list of them (several calls,
  each may name its own ``json``), with ``json`` as ``json_arg`` (default "json"; None: not
  passed)."""
  runs = config["args"] if isinstance(config["args"], list) else [config["args"]]
  arg = config.get("json_arg", "json")
  out = []
  for r in runs:
    kwargs = {k: v for k, v in r.items() if k != "json"}
    if arg is not None:
      kwargs[arg] = r.get("json", config["json"])
    out.append(kwargs)
  return out


def _run_calls(config: dict[str, Any], dry: bool) -> list[Any]:
  fn, out = function(config), []
  for kwargs in calls(config):
    inspect.signature(fn).bind(**kwargs)  # a wrong or missing name fails before any run
    print(f"{config['call']}(**{json.dumps(kwargs)})", flush=True)
    if not dry:
      out.append(fn(**kwargs))
  return out


def _run_bench(config: dict[str, Any], module: Any, dry: bool) -> dict[str, Any] | None:
  """Each arm through ``rsjax.app.bench.bench`` (in order, one process); one JSON of them all."""
  from rsjax.app.bench import Request, bench, machine, report

  request = Request(**config["bench"])
  print(f"rsjax.app.bench: {request}; arms {[a['name'] for a in config['arms']]}", flush=True)
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
  ap.add_argument("--config", help="benchmarks/configs/X.py")
  ap.add_argument("--lease-env", metavar="OUT", help="the lease's machine record: OUT/env.json")
  ap.add_argument("--lease-merge", metavar="OUT", help="the lease's OUT/gpu.json from its stages")
  ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
  ap.add_argument("--dry-run", action="store_true", help="print what would run")
  ap.add_argument("--machine-record", action="store_true", help="write <json>.machine.json")
  args = ap.parse_args(argv)
  if args.lease_env or args.lease_merge:
    return lease_env(args.lease_env) if args.lease_env else lease_merge(args.lease_merge)
  if not args.config:
    ap.error("--config is required")
  config, module = load(args.config)
  for assignment in args.set:
    override(config, assignment)
  if "call" in config:
    out = _run_calls(config, args.dry_run)
    if args.machine_record and not args.dry_run:
      from rsjax.app.bench import machine, report

      report.write_json(config["json"] + ".machine.json", machine.environment())
    return out
  doc = _run_bench(config, module, args.dry_run)
  if doc is not None:
    from rsjax.app.bench import report

    doc["command"] = shlex.join(["python", "-m", "benchmarks.run", *sys.argv[1:]])
    print(f"json: {report.write_json(config['json'], doc)}")
  return doc


def _read_json(path: str) -> Any:
  try:
    with open(path, encoding="utf-8") as fh:
      return json.load(fh)
  except (OSError, ValueError):
    return None


def _write_json(path: str, doc: Any) -> None:
  with open(path, "w", encoding="utf-8") as fh:
    json.dump(doc, fh, indent=1, default=str)


def lease_env(out: str) -> dict[str, Any]:
  """``OUT/env.json``: the machine record, the device's memory statistics and its topology."""
  from rsjax.app.bench import machine

  try:  # the twin's PyTorch, so that its CUDA and cuDNN versions are recorded
    import torch  # noqa: F401
  except ImportError:
    pass
  import jax

  os.makedirs(out, exist_ok=True)
  rec = machine.environment()
  try:
    rec["memory_stats"] = jax.devices()[0].memory_stats()
  except Exception:  # noqa: BLE001 -- CPU devices have none
    rec["memory_stats"] = None
  try:
    from jax.experimental import topologies

    topo = topologies.get_attached_topology()
    rec["topology"] = {"repr": repr(topo)[:2000]}
    if getattr(topo, "target_config", None) is not None:
      with open(os.path.join(out, "target_config.txtpb"), "w", encoding="utf-8") as fh:
        fh.write(str(topo.target_config))
      rec["topology"]["target_config"] = "target_config.txtpb"
  except Exception as e:  # noqa: BLE001 -- no such API on this JAX, or no accelerator
    rec["topology"] = {"error": f"{type(e).__name__}: {e}"[:300]}
  _write_json(os.path.join(out, "env.json"), rec)
  print(json.dumps(rec, indent=1, default=str))
  return rec


def lease_merge(out: str) -> dict[str, Any]:
  """``OUT/gpu.json``: every stage of ``OUT/stages.jsonl`` in order (status, seconds, limit,
  log) with its JSON's rows, and ``OUT/env.json``."""
  stages = []
  path = os.path.join(out, "stages.jsonl")
  if os.path.exists(path):
    with open(path, encoding="utf-8") as fh:
      stages = [json.loads(line) for line in fh if line.strip()]
  for s in stages:
    if s.get("json"):
      s["data"] = _read_json(os.path.join(out, s["json"]))
  merged = {
    "written": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    "env": _read_json(os.path.join(out, "env.json")),
    "stages": stages,
  }
  _write_json(os.path.join(out, "gpu.json"), merged)
  print(", ".join(f"{s['stage']}: {s['status']}" for s in stages))
  return merged


if __name__ == "__main__":
  main()
