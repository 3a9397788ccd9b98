"""The CPU profile of the sampling loop (issue 66, item 1; ``benchmarks/configs/cpu_profile.py``).

* The command at tiny sizes in a subprocess, every section on (no timing is asserted): each
  figure is there, the twin agrees with rsjax, XLA's breakdown finds the program's thunks.
* The XLA breakdown's parts on a hand-written program text and trace (no JAX).
* RESULTS.md's table is the one ``benchmarks.cpu_profile.table`` renders from the committed
  JSON, and the section names the command.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

# A test of the tools around the library: .ci/run runs it in the py311 stage only.
pytestmark = pytest.mark.tools

ROOT = pathlib.Path(__file__).resolve().parents[1]
JSON = ROOT / "benchmarks" / "results" / "cpu_profile.json"
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
HEADING = "## CPU profile of the sampling loop"
LEVERS = ["as built", "batch norm folded", "packed by 2", "packed by 4", "folded, packed by 2"]


def _run(tmp_path, *sets) -> dict:
  out = tmp_path / "cpu_profile.json"
  argv = [sys.executable, "-m", "benchmarks.run", "--config", "benchmarks/configs/cpu_profile.py"]
  for s in (f"json={out}", *sets):
    argv += ["--set", s]
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env.pop("XLA_FLAGS", None)
  proc = subprocess.run(
    argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, check=False
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  return {**json.loads(out.read_text()), "_stdout": proc.stdout}


def test_the_profile_runs_at_tiny_sizes(tmp_path):
  doc = _run(
    tmp_path,
    "args.models=lenet",
    'args.batches={"lenet": [8]}',
    'args.steps={"lenet": 2}',
    'args.trace_batch={"lenet": 8}',
    "args.rounds=1",
    "args.min_s=0",
    "args.torch_threads=[1]",
    "args.twin_compile=none",
    "args.trace_calls=1",
    "args.variant_batch=4",
    'args.flag_models=["lenet"]',
    'args.flag_variants=["default"]',
    "args.lever_models=[]",  # ResNets only: test_levers_pack_and_fold_resnet20
  )
  assert "| lenet | 8 | rsjax |" in doc.pop("_stdout")
  assert doc["machine"]["versions"]["jax"] and len(doc["load_avg_end"]) == 3
  m = doc["models"]["lenet"]
  sides = m["batches"]["8"]["sides"]
  arms = ("noise", "noise_fast", "forward", "count", "step", "pass1", "pass", "program")
  assert set(sides["rsjax"]["times"]) == set(arms)
  for t in sides["rsjax"]["times"].values():
    assert 0 < t["min"] <= t["median"] <= t["max"] and len(t["rounds"]) == 1
  assert set(sides["rsjax"]["derived"]) >= {"parts", "loop step", "fixed ms", "host ms"}
  for program in ("forward", "step", "engine loop"):
    b = m["xla_breakdown"][program]
    assert b["traced_wall_ms_per_1000"] > 0 and b["top_thunks"], program
  assert m["xla_breakdown"]["forward"]["wall_ms_per_1000"]["conv"] > 0
  assert m["xla_breakdown"]["engine loop"]["wall_ms_per_1000"]["noise"] > 0
  v = doc["flags"]["variants"]["default"]  # a worker process: compiled, timed, its program read
  assert v["lenet"]["max_abs_diff"] == 0.0 and v["lenet"]["median"] > 0
  assert v["program"]["lenet"]["bare convolutions"] == 1  # conv2; conv1 is multiply-adds
  assert doc["im2col"]["conv_max_abs_diff"] < 1e-3
  assert doc["im2col"]["written_out_vs_model_max_abs_diff"] < 1e-4
  assert set(doc["dtypes"]["models"]["lenet"]) >= {"float32", "bfloat16", "argmax_differs"}
  assert len(doc["layouts"]["convs"]) == 4
  try:
    import torch  # noqa: F401
  except ImportError:
    return
  assert set(sides) == {"rsjax", "eager@1"}
  assert m["twin"]["logits"]["argmax_agree"] == 1.0
  assert doc["layers"]["pieces_vs_model_max_abs_diff"] < 1e-4
  assert "torch sum of layers" in doc["layers"]["sum_of_medians"]


def test_levers_pack_and_fold_resnet20(tmp_path):
  doc = _run(
    tmp_path,
    "args.models=lenet",
    "args.sections=levers",
    "args.variant_batch=2",
    "args.rounds=1",
    "args.min_s=0",
    'args.lever_models=["resnet20"]',
  )
  arms = doc["levers"]["models"]["resnet20"]
  assert list(arms) == LEVERS
  for a in arms.values():
    assert a["median"] > 0 and a["max_abs_diff"] < 1e-3
  # packing by 4 widens the 16-channel stage to 64 channels: fewer convolutions left to Eigen
  assert arms["packed by 4"]["bare convolutions"] <= arms["as built"]["bare convolutions"]


def test_the_breakdown_reads_a_program_and_its_trace():
  sys.path.insert(0, str(ROOT))
  try:
    from benchmarks import cpu_breakdown as cb
  finally:
    sys.path.remove(str(ROOT))
  text = "\n".join(
    [
      '  %w = u32[8,392]{1,0} fusion(%k), kind=kLoop, metadata={op_name="jit(f)/add"}',
      '  %c = f32[8,10,10,16]{3,2,1,0} convolution(%a, %b), metadata={op_name="jit(f)/x"}',
      '  ROOT %r = (f32[8]{0}, s32[8]{0}) fusion(%l), metadata={op_name="jit(f)/reduce"}',
      '  %m = f32[8,64]{1,0} fusion(%y), kind=kLoop, metadata={op_name="jit(f)/reduce_sum"}',
      "  %while.1 = (s32[], f32[8]{0}) while(%t), condition=%c1, body=%b1",
      "}",
      "%fused_computation.3 (param_0: f32[8,8,8,64]) -> f32[8,10] {",
      "  %x = f32[8,8,8,64]{3,2,1,0} convolution(%param_0, %k), window={size=3x3}",
      "  ROOT %d = f32[8,10]{1,0} dot(%x, %h)",
      "}",
      "ENTRY %main (p: f32[8,8,8,64]) -> f32[8,10] {",
      "  ROOT %ynn_fusion = f32[8,10]{1,0} fusion(%p), kind=kCustom, calls=%fused_computation.3, "
      'metadata={op_name="jit(f)/dot_general"}, backend_config={"fusion_config":'
      '{"kind":"__ynn_fusion"}}',
      "}",
    ]
  )
  index = cb.hlo_index(text)
  assert {k: cb.classify(v) for k, v in index.items()} == {
    "w": "noise",
    "c": "conv",
    "r": "count",
    "m": "pool",
    "while.1": "loop/copy",
    "x": "conv",
    "d": "dense",
    "ynn_fusion": "conv",  # a stage's convolutions and the head in one YNNPACK fusion
  }
  assert index["ynn_fusion"].runtime == "YNNPACK" and index["c"].runtime == "XLA runtime kernel"
  events = [  # a loop with two thunks inside it on one thread, one on another
    {"pid": 1, "tid": 1, "ts": 0, "dur": 10, "name": "while.1"},
    {"pid": 1, "tid": 1, "ts": 1, "dur": 3, "name": "c"},
    {"pid": 1, "tid": 1, "ts": 5, "dur": 4, "name": "w"},
    {"pid": 1, "tid": 2, "ts": 1, "dur": 3, "name": "c"},
  ]
  assert sorted(cb.self_times(events)) == [("c", 3.0), ("c", 3.0), ("w", 4.0), ("while.1", 3.0)]
  # wall time: start to the next start; the last to the program's end (its work outlasts it)
  assert cb.wall_times(events[:3], end=20.0) == [("while.1", 1.0), ("c", 4.0), ("w", 15.0)]


def _section() -> list[str]:
  lines = RESULTS.read_text(encoding="utf-8").splitlines()
  (start,) = [i for i, line in enumerate(lines) if line.startswith(HEADING)]
  end = next((j for j in range(start + 1, len(lines)) if lines[j].startswith("## ")), len(lines))
  return lines[start:end]


@pytest.mark.skipif(not JSON.exists(), reason="no committed cpu_profile.json")
def test_results_tables_are_the_json_rendered():
  """Every table of the section is ``benchmarks.cpu_report``'s rendering of the committed JSON,
  line for line, and the section names its command and the load it ran under."""
  sys.path.insert(0, str(ROOT))
  try:
    from benchmarks import cpu_report
  finally:
    sys.path.remove(str(ROOT))
  doc = json.loads(JSON.read_text())
  section = "\n".join(_section())
  for title, render, key in cpu_report.TABLES:
    assert doc.get(key), title
    assert render(doc) in section, f"RESULTS.md's table {title!r} is not the JSON's"
  assert "python -m benchmarks.run --config benchmarks/configs/cpu_profile.py" in section
  start, end = (f"{doc[k][0]:.1f}" for k in ("load_avg_start", "load_avg_end"))
  assert f"load average {start} at the start and {end} at the end" in section


def _rsjax_over_compiled(doc, model):
  r = [
    row["sides"]["rsjax"]["times"]["pass"]["median"]
    / row["sides"]["compiled@1"]["times"]["pass"]["median"]
    for row in doc["models"][model]["batches"].values()
  ]
  return f"{min(r):.2f}x to {max(r):.2f}x"


def _two_threads_over_one(doc):
  r = [
    s[f"{k}@2"]["times"]["pass"]["median"] / s[f"{k}@1"]["times"]["pass"]["median"]
    for m in doc["models"].values()
    for s in (row["sides"] for row in m["batches"].values())
    for k in ("eager", "compiled")
    if f"{k}@2" in s
  ]
  return f"{min(r):.1f}x to {max(r):.1f}x"


def _lenet_1000(doc, key):
  return doc["models"]["lenet"]["batches"]["1000"]["sides"]["rsjax"]["times"][key]["median"]


def _lever_min(doc, label):
  arms = doc["levers"]["models"]["resnet110"]
  return f"{arms[label]['min'] / arms['as built']['min']:.2f}x by the minima"


#: (the prose's text with a figure derived from the JSON, the figure): what the tables do not
#: show as such.
DERIVED = [
  ("(2829 s)", lambda d: f"({d['seconds']:.0f} s)"),
  ("the second (265 s)", lambda d: f"the second ({d['updates'][0]['seconds']:.0f} s)"),
  ("pass took 1.8x to 31.0x as long", lambda d: f"pass took {_two_threads_over_one(d)} as long"),
  ("(rsjax's pass 1.15x to 1.68x", lambda d: f"(rsjax's pass {_rsjax_over_compiled(d, 'lenet')}"),
  (
    "(1.34x to 1.55x the compiled",
    lambda d: f"({_rsjax_over_compiled(d, 'resnet20')} the compiled",
  ),
  (
    "(1.14x to 1.66x the compiled",
    lambda d: f"({_rsjax_over_compiled(d, 'resnet110')} the compiled",
  ),
  (
    "15% of rsjax's step",
    lambda d: f"{_lenet_1000(d, 'noise') / _lenet_1000(d, 'step'):.0%} of rsjax's step",
  ),
  (
    "cuts it 3.7x",
    lambda d: f"cuts it {_lenet_1000(d, 'noise') / _lenet_1000(d, 'noise_fast'):.1f}x",
  ),
  ("0.89x (0.85x by the minima)", lambda d: f"0.89x ({_lever_min(d, 'folded, packed by 2')})"),
  ("1.03x (0.88x by the minima)", lambda d: f"1.03x ({_lever_min(d, 'packed by 2')})"),
]


@pytest.mark.skipif(not JSON.exists(), reason="no committed cpu_profile.json")
@pytest.mark.parametrize("text, figure", DERIVED, ids=[t for t, _ in DERIVED])
def test_derived_figures_are_the_jsons(text, figure):
  section = " ".join(" ".join(_section()).split())
  assert text in section, f"{text!r} is no longer quoted"
  assert figure(json.loads(JSON.read_text())) == text
