"""Smoke test of the benchmark harness (no timing is asserted).

Runs the configs of ``benchmarks/configs/`` (``python -m benchmarks.run --config ... --set ...``)
on tiny workloads in subprocesses and checks that they report every figure; with
PyTorch installed (a benchmark-only extra) it also checks the reference side:
the PyTorch twins compute the same logits as the rsjax models, and the reference
loops (PyTorch and plain JAX) count every sample.
"""

import importlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

# A test of the tools around the library: .ci/run runs it in the py311 stage only.
pytestmark = pytest.mark.tools

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The wall-clock limit of a subprocess: a hang, never a loaded machine (issue 66: a 300 s limit
#: failed a fresh clone's CI on a busy machine). No timing is asserted here.
HANG_S = 1800


def _has_torch() -> bool:
  try:
    import torch  # noqa: F401
  except ImportError:
    return False
  return True


def _benchmark_module(name: str):
  sys.path.insert(0, ROOT)
  try:
    return importlib.import_module(f"benchmarks.{name}")
  finally:
    sys.path.remove(ROOT)


def _config(name: str, json_path, **args) -> list[str]:
  """The command of ``benchmarks/configs/NAME.py`` with ``args`` set and its JSON at ``json_path``."""
  sets = [f"json={json_path}"] + [f"args.{k}={v}" for k, v in args.items()]
  argv = [sys.executable, "-m", "benchmarks.run", "--config", f"benchmarks/configs/{name}.py"]
  return argv + [a for s in sets for a in ("--set", s)]


def test_throughput_command_reports_all_figures(tmp_path):
  out = tmp_path / "bench.json"
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env.pop("XLA_FLAGS", None)
  proc = subprocess.run(
    _config("throughput_cpu", out, models="mlp", num=500, reps=1, batch_size=128, quick="false"),
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=HANG_S,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "| mlp | 500 | 128 |" in proc.stdout
  report = json.loads(out.read_text())
  assert report["environment"]["versions"]["jax"]
  (r,) = report["results"]
  for k in (
    "rsjax_samples_per_s",
    "rsjax_s_per_image",
    "compile_s",
    "step_memory_mb",
    "flops_per_sample",
    "bf16_samples_per_s",
  ):
    assert r[k] > 0, k
  assert r["s_per_image_kind"] == "extrapolated from N=500"
  # The MLP's XLA FLOPs are close to the analytic 2 * (784*256 + 256*256 + 256*10).
  analytic = 2 * (784 * 256 + 256 * 256 + 256 * 10)
  assert 0.8 * analytic < r["flops_per_sample"] < 1.5 * analytic
  if _has_torch():
    assert r["reference_samples_per_s"] > 0
    assert r["ratio"] > 0
    assert r["logits_check"]["argmax_agree"] == 1.0


def test_gpu_suite_runs_on_cpu(tmp_path):
  # The --suite gpu command at a tiny N on the CPU (so it cannot rot), with the
  # persistent compilation cache on.
  out, cache = tmp_path / "gpu.json", tmp_path / "cache"
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env.pop("XLA_FLAGS", None)
  proc = subprocess.run(
    _config(
      "gpu_suite",
      out,
      models="mlp",
      num=100,
      n0=10,
      images=2,
      batch_size=50,
      twin_compile="none",
      device_peaks="1,0.5,0.05",
      compile_cache=cache,
      precisions="fp32,tf32,bf16",
      dataset_images=3,
      dataset_model="mlp",
      fold_bn="true",
    ),  # fmt: skip
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=HANG_S,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  results = json.loads(out.read_text())["results"]
  rows = [r for r in results if "task" not in r]
  assert [(r["model"], r["precision"]) for r in rows] == [
    ("mlp", "fp32"),
    ("mlp", "tf32"),
    ("mlp", "bf16"),
  ]
  data = [r for r in results if r.get("task") == "dataset3"]
  assert [r["precision"] for r in data] == ["fp32", "tf32", "bf16"]
  for r in data:  # the test-set row: fixed N and budgeted over 3 images
    assert r["rsjax_fixed_s"] > 0 and r["rsjax_budgeted_s"] > 0
    assert 0 < r["budgeted_mean_samples"] <= 100
    if _has_torch():
      assert r["twin_fixed_s"] > 0 and r["ratio_fixed"] > 0
  for r in rows:
    assert r["fold_bn"] is True
    # The FLOPs of the jaxpr: 2 x MACs of the MLP's three dense layers, on every backend.
    assert r["flops_per_sample"] == 2 * (784 * 256 + 256 * 256 + 256 * 10)
    rs = r["rsjax"]
    assert rs["images"] == 2 and len(rs["predictions"]) == 2
    for k in ("samples_per_s", "seconds_per_image", "seconds_per_image_p50", "compile_s"):
      assert rs[k] > 0, k
    assert r["mfu"] > 0 and r["bound"]["bound_s"] > 0 and r["bound_fraction"] > 0
    assert r["activation_elements_per_sample"] == 256 + 256 + 10  # the MLP's dense outputs
    if _has_torch():
      assert r["twin"]["seconds_per_image"] > 0 and r["ratio_to_twin"] > 0
      assert r["logits_check"]["argmax_agree"] == 1.0
  assert any(cache.iterdir())  # compiled programs were kept


def test_suite_json_keeps_other_entries(tmp_path):
  sys.path.insert(0, ROOT)
  try:
    from benchmarks import measure as suite_report
  finally:
    sys.path.remove(ROOT)
  path = str(tmp_path / "r" / "gpu.json")
  suite_report.write_json(
    path,
    {"d": 1},
    [{"model": "a", "precision": "fp32", "v": 1}, {"model": "a", "precision": "bf16", "v": 2}],
  )
  suite_report.write_json(path, {"d": 2}, [{"model": "a", "precision": "bf16", "v": 3}])
  got = {(r["model"], r["precision"]): r["v"] for r in json.loads(open(path).read())["results"]}
  assert got == {("a", "fp32"): 1, ("a", "bf16"): 3}


def test_certified_accuracy_parity():
  sys.path.insert(0, ROOT)
  try:
    from benchmarks import quality as precision
  finally:
    sys.path.remove(ROOT)
  from types import SimpleNamespace as C

  y = np.arange(100) % 10
  a = C(prediction=y.copy(), radius=np.linspace(0, 1, 100))
  same = precision.certified_accuracy_parity(y, a, C(prediction=y.copy(), radius=a.radius.copy()))
  assert same["within"] and same["max_abs_diff_points"] == 0
  b = C(prediction=y.copy(), radius=a.radius.copy())
  b.prediction[:2] = -1  # two abstentions among 100 inputs: 2 points at radius 0
  par = precision.certified_accuracy_parity(y, a, b, radii=(0.0, 0.5))
  assert par["max_abs_diff_points"] == pytest.approx(2.0) and not par["within"]
  assert precision.certified_accuracy_parity(y, a, b, max_points=2.0)["within"]
  assert par["accuracy_a"][0] == 1.0 and par["accuracy_b"][0] == pytest.approx(0.98)


@pytest.mark.parametrize(
  "name,shape",
  [
    ("mlp", (6, 6, 2)),
    ("lenet", (28, 28, 1)),
    ("cnn", (10, 10, 1)),
    ("resnet20", (8, 8, 3)),
  ],
)
def test_torch_twin_has_the_same_logits(name, shape):
  torch = pytest.importorskip("torch")
  from rsjax import models
  from rsjax.app.bench import torch_models as tm

  model = models.create_model(name, num_classes=7, input_shape=shape, rngs=3)
  apply_fn, variables = models.to_apply_fn(model)
  twin = tm.from_flax(model, shape)
  x = np.random.default_rng(0).random((5,) + shape, dtype=np.float32)
  check = tm.check_same_logits(twin, apply_fn, variables, x)
  assert check["max_abs_diff"] <= 1e-4 * max(check["logit_scale"], 1.0)
  # A wrong weight layout is caught (the check can fail).
  with torch.no_grad():
    p = next(twin.parameters())
    p.mul_(-1.5)
  with pytest.raises(AssertionError, match="differs"):
    tm.check_same_logits(twin, apply_fn, variables, x)


def test_reference_loop_counts_every_sample():
  torch = pytest.importorskip("torch")
  rt = _benchmark_module("twins")
  lin = torch.nn.Linear(4, 3)
  with torch.no_grad():
    lin.weight.zero_()
    lin.bias.copy_(torch.tensor([0.0, 1.0, 0.0]))
  counts = rt.sample_noise_reference(lin, torch.zeros(4), 1001, 400, sigma=0.5, num_classes=3)
  assert counts.tolist() == [0, 1001, 0]
  torch.manual_seed(0)
  lin2 = torch.nn.Linear(4, 3)
  counts = rt.sample_noise_reference(lin2, torch.zeros(4), 999, 400, sigma=1.0, num_classes=3)
  assert counts.sum() == 999 and (counts > 0).sum() >= 2


def test_tuned_twin_counts_every_sample_once():
  torch = pytest.importorskip("torch")
  rt = _benchmark_module("twins").tuned()
  lin = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
  with torch.no_grad():
    lin[1].weight.zero_()
    lin[1].bias.copy_(torch.tensor([0.0, 1.0, 0.0]))
  x = np.zeros((4,), np.float32)
  counts = rt.tuned_counts(lin, x, 1001, 400, sigma=0.5, num_classes=3)
  assert counts.tolist() == [0, 1001, 0]  # the last, partial batch is counted once
  torch.manual_seed(0)
  lin2 = torch.nn.Linear(4, 3)
  gen = rt.torch_generator(0)
  c = rt.tuned_counts(lin2, x, 999, 400, sigma=1.0, num_classes=3, generator=gen)
  assert c.sum() == 999 and (c > 0).sum() >= 2
  pred, radius = rt.tuned_certify(
    lin, x, n0=10, n=1000, alpha=0.001, sigma=0.5, num_classes=3, batch_size=300
  )
  # All 1,000 samples on class 1: Clopper-Pearson p_lower = 0.001 ** (1 / 1000).
  from scipy import stats as st

  assert pred == 1 and radius == pytest.approx(0.5 * st.norm.ppf(0.001 ** (1 / 1000)), rel=1e-6)


def test_profile_reports_every_piece():
  sys.path.insert(0, ROOT)
  try:
    from benchmarks import profile
  finally:
    sys.path.remove(ROOT)
  out = profile.pieces("mlp", num=20, batch_size=10, reps=1)
  assert out["steps"] == 2
  for piece in ("engine", "noise", "forward", "count + rest", "launch", "host statistics"):
    assert out["times"][piece]["wall_s"] >= 0, piece
  assert out["times"]["engine"]["wall_s"] > 0
  assert "| noise |" in profile.report(out)

  streams = profile.noise_streams(reps=1, samples=4, shape=(10,))
  assert len(streams) == 5 and all(v["M_normals_per_wall_s"] > 0 for v in streams.values())
  # rsjax's streams are batch-invariant; JAX's RngBitGenerator keys are not.
  assert {k: v["batch_invariant"] for k, v in streams.items()} == {
    "jax.random.normal": True,
    "jax.random.normal, rbg key": False,
    "jax.random.normal, unsafe_rbg key": False,
    "threefry20 (default)": True,
    "threefry13 (gaussian_fast)": True,
  }


def test_per_image_table_runs_and_prints_its_ratios(tmp_path):
  # The issue-44 table (benchmarks.calls.per_image) at a tiny size, in a subprocess:
  # rsjax with 1, 2 and 3 images per call against the plain-JAX per-image loop.
  # The ratios are printed (and kept in the JSON), never asserted: a shared CPU
  # makes them noisy; RESULTS.md records the full run.
  out = tmp_path / "per_image.json"
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env.pop("XLA_FLAGS", None)
  proc = subprocess.run(
    _config(
      "per_image",
      out,
      models="mlp",
      images="1,2,3",
      batch_sizes=64,
      num=200,
      n0=20,
      reps=1,
      mode="certify",
      reference_images=1,
    ),  # fmt: skip
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=HANG_S,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  print(proc.stdout)
  assert "| model | mode | N | batch | images/call | rsjax s/image, wall (CPU) |" in proc.stdout
  rows = json.loads(out.read_text())["results"]
  assert [(r["model"], r["batch_size"], r["images_per_call"]) for r in rows] == [
    ("mlp", 64, 1),
    ("mlp", 64, 2),
    ("mlp", 64, 3),
  ]
  for r in rows:
    assert r["rsjax_s_per_image"] > 0 and r["reference_s_per_image"] > 0
    for ratio in (
      "vs_one_image",
      "vs_one_image_cpu",
      "reference_over_rsjax",
      "reference_over_rsjax_cpu",
    ):
      assert r[ratio] > 0, ratio
    assert f"| mlp | certify | 200 | 64 | {r['images_per_call']} |" in proc.stdout


def test_plain_jax_reference_loop_counts_every_sample():
  import jax
  import jax.numpy as jnp
  from scipy import stats as st

  rj = _benchmark_module("twins")

  def constant(params, x):  # class 1 whatever the input
    return jnp.zeros((x.shape[0], 3)).at[:, 1].set(params)

  loop = rj.ReferenceLoop(constant, jnp.float32(1.0), num_classes=3, sigma=0.5, batch_size=400)
  x = np.zeros((4,), np.float32)
  # 1,001 = 400 + 400 + 201: the last, shorter batch counted once, as in core.py.
  assert loop.sample_noise(jax.random.key(0), x, 1001).tolist() == [0, 1001, 0]
  pred, radius = loop.certify(jax.random.key(1), x, n0=10, n=1000, alpha=0.001)
  assert pred == 1 and radius == pytest.approx(0.5 * st.norm.ppf(0.001 ** (1 / 1000)), rel=1e-6)


def test_trace_summary_of_a_device_trace():
  """The device-time summary of a hand-made perfetto trace: classes, busy time, gaps."""
  trace_summary = _benchmark_module("profile")
  meta = [
    {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/device:GPU:0"}},
    {"ph": "M", "pid": 7, "name": "process_name", "args": {"name": "/host:CPU"}},
  ]
  kernels = [  # (stream, start us, duration us, name, hlo op)
    (1, 0, 100, "sm90_xmma_fprop_implicit_gemm_bf16", "cudnn-conv.1"),
    (2, 50, 100, "loop_maximum_fusion", "fusion.3"),  # overlaps the first on another stream
    (1, 300, 50, "MemcpyD2D", "copy.1"),
    (1, 400, 10, "threefry2x32", "fusion.9"),
  ]
  events = meta + [
    {"ph": "X", "pid": 1, "tid": s, "ts": t, "dur": d, "name": n, "args": {"hlo_op": h}}
    for s, t, d, n, h in kernels
  ]
  events.append({"ph": "X", "pid": 7, "tid": 1, "ts": 0, "dur": 999, "name": "PjitFunction"})
  s = trace_summary.summarize({"traceEvents": events})
  assert s["source"] == "gpu" and s["kernels"] == 4
  assert {k: v["kernels"] for k, v in s["by_class"].items()} == {
    "convolution": 1,
    "fusion": 1,
    "copy": 1,
    "random": 1,
  }
  np.testing.assert_allclose(s["kernel_ms"], 0.26)
  np.testing.assert_allclose(s["busy_ms"], 0.21)  # [0, 150] + [300, 350] + [400, 410]
  np.testing.assert_allclose(s["span_ms"], 0.41)
  np.testing.assert_allclose(s["gap_ms"], 0.20)


def test_streams_and_frontier_report_their_figures(tmp_path):
  # The stopping-rule benchmarks at 40 streams: every rule's figures, exact errors within alpha
  # (at N = 20,000: quicker), and the agree weight's trade-off in the direction the rule's
  # docstring says.
  streams = _benchmark_module("streams")
  out = streams.run(40, n_max=20_000, alpha=0.001, sigma=0.25, dense=1.05,
                    grid=(0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5))  # fmt: skip
  assert set(out["mix_ratio_fixed"]) == set(streams.RULES) and out["mix_ratio_fixed"]["fixed"] == 1
  assert (
    out["exact_error"]["max"]["anytime"] <= 0.001 and out["exact_error"]["max"]["looks"] <= 0.001
  )
  budgeted = _benchmark_module("budgeted")
  res = budgeted.frontier(streams=40, shares=(0.6,), weights=(0.0, 0.5), exact=False,
                          json=str(tmp_path / "f.json"))  # fmt: skip
  (plain, agree) = res["rows"]
  assert plain["mnist"]["all_agree_digits"] == agree["mnist"]["all_agree_digits"] == 75
  assert (
    agree["mnist"]["all_agree_stop_every_sample"] < plain["mnist"]["all_agree_stop_every_sample"]
  )
  assert agree["streams"]["all_agree_samples"] < plain["streams"]["all_agree_samples"]


def test_conv_micro_packed_equals_unpacked(tmp_path):
  # The stage-1 conv rewrites (2/4-packed block-diagonal, zero-padded, grouped) compute the
  # base 16-channel convolution's outputs, up to float32 rounding; the timing rows are complete.
  conv_micro = _benchmark_module("conv_micro")
  import jax.numpy as jnp

  for k, v in conv_micro.check_rewrites(jnp.float32, batch=8).items():
    assert v["max_abs_diff"] <= 1e-5 * v["scale"], k
  out = conv_micro.conv_micro(batch=8, precision="fp32", cases="base16,pack2", reps=1, loop=2,
                              epilogues="plain,bias_res_relu", json=str(tmp_path / "c.json"))  # fmt: skip
  rows = {(r["case"], r["epilogue"]): r for r in out["rows"]}
  assert len(rows) == 4 and all(r["ms_per_conv"] > 0 for r in rows.values())
  base, pack2 = rows["base16", "plain"], rows["pack2", "plain"]
  assert base["flops_per_conv"] == 8 * 32 * 32 * 16 * 16 * 9 * 2  # 4.72 MFLOP per sample
  assert pack2["flops_per_conv"] == 2 * base["flops_per_conv"]  # the zero blocks count
  assert pack2["batch_rows"] == 4 and pack2["samples"] == 8


def test_compiled_twin_runs_beside_the_eager_one(tmp_path):
  # --twin-compile at the smallest settings that still compile the twin: the MLP's twin under
  # torch.compile (one mode, "default": no autotuning), N = n0 = batch = 8 (one batch shape to
  # compile), float32, one image; timed beside the eager twin.
  pytest.importorskip("torch")
  out = tmp_path / "gpu.json"
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env.pop("XLA_FLAGS", None)
  proc = subprocess.run(
    _config("gpu_suite", out, models="mlp", num=8, n0=8, images=1, batch_size=8,
            precisions="fp32", twin_compile="default"),
    cwd=ROOT, env=env, capture_output=True, text=True, timeout=HANG_S, check=False,
  )  # fmt: skip
  assert proc.returncode == 0, proc.stderr[-3000:]
  (r,) = json.loads(out.read_text())["results"]
  twc = r["twin_compiled"]
  if twc["mode"] is None:
    pytest.skip(f"torch.compile cannot run here: {twc['tried']}")
  rt = _benchmark_module("twins").tuned()
  assert twc["mode"] == "default" and twc["mode"] in rt.COMPILE_MODES
  assert twc["compile_s"] > 0 and twc["seconds_per_image"] > 0 and twc["images"] == 1
  assert r["twin"]["compile"] == "none" and r["twin"]["seconds_per_image"] > 0
  assert r["ratio_to_twin_compiled"] > 0
  assert len(twc["predictions"]) == 1


#: The lease script's stages, by the groups each test runs (``gpu_lease.sh`` takes stage names).
LEASE_GROUPS = {
  "s0 s1": ["env", "conv", "conv_unfused"],
  "s2": ["lenet_scaling", "lenet_trace", "lenet_nocmdbuf"],
  "s3_fold": ["r110_base", "r110_fold", "r110_fold_unfused"],
  "s3_pack": ["r110_pack2", "r110_pack2_fold", "r110_pack4"],
  "s4 s5": ["r50", "twin_mlp"],
}


@pytest.mark.parametrize("group", list(LEASE_GROUPS))
def test_lease_script_runs_every_stage_on_cpu(tmp_path, group):
  # benchmarks/gpu_lease.sh on the CPU at the smallest sizes (benchmarks.levers.LEASE_SMOKE),
  # what it must prove: every stage ends with rc 0 (or is skipped as a GPU-only stage) and
  # leaves its JSON, merged into gpu.json. One group of stages a test (all of them in one took
  # 789 s on a loaded machine; s3 in two halves); limits x 100 (LIMIT_SCALE) so that no load reaches one. The
  # lease image has PyTorch, so the script is tried where torch is installed (its twin stage
  # runs): one CI environment, not two. s3's six variants run on ResNet-20 (R110_MODEL): the
  # same blocks as ResNet-110's, a fifth of the program to compile in each of their processes.
  pytest.importorskip("torch")
  sizes = _benchmark_module("levers").LEASE_SMOKE
  out = tmp_path / "out"
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHON=sys.executable, OUT=str(out),
             CACHE_DIR=str(tmp_path / "cache"), **sizes)  # fmt: skip
  env.pop("XLA_FLAGS", None)
  proc = subprocess.run(
    ["bash", "benchmarks/gpu_lease.sh", *group.split()],
    cwd=ROOT, env=env, capture_output=True, text=True, timeout=HANG_S, check=False,
  )  # fmt: skip
  assert proc.returncode == 0, proc.stdout[-3000:]
  merged = json.loads((out / "gpu.json").read_text())
  stages = {s["stage"]: s for s in merged["stages"]}
  assert [s["stage"] for s in merged["stages"]] == LEASE_GROUPS[group]
  for name, s in stages.items():
    if s["status"].startswith("skipped"):
      assert name == "lenet_nocmdbuf", (name, s["status"])  # GPU only
      continue
    assert (s["status"], s["rc"]) == ("ok", 0), (name, s, (out / s["log"]).read_text()[-2000:])
    assert s["data"], name  # the stage's JSON was written and merged
  _check_lease_stages(merged, stages)


def _check_lease_stages(merged: dict, stages: dict) -> None:
  """What each stage of the lease script wrote, for the stages of one group."""
  if "env" in stages:
    assert merged["env"]["versions"]["jax"]
  if "conv" in stages:
    assert len(stages["conv"]["data"]["rows"]) == 18 and stages["conv"]["data"]["check"]
    assert {r["tag"] for r in stages["conv_unfused"]["data"]["rows"]} == {"unfused"}
  if "lenet_scaling" in stages:
    fit = stages["lenet_scaling"]["data"]["fit_best"]
    assert set(fit) == {"intercept_ms", "slope_ns_per_sample"}
    assert stages["lenet_trace"]["data"]["kernels"] > 0
  for name in ("r110_base", "r110_fold", "r110_fold_unfused", "r50"):
    if name in stages:
      (row,) = stages[name]["data"]["results"]
      assert row["rsjax"]["seconds_per_image"] > 0 and row["rsjax"]["compile_s"] > 0, name
  if "r110_fold" in stages:
    assert stages["r110_fold"]["data"]["results"][0]["fold_bn"] is True
  if "twin_mlp" in stages:
    (twin,) = stages["twin_mlp"]["data"]["results"]
    assert twin["twin"]["seconds_per_image"] > 0
    assert twin["twin_compiled"]["mode"] in ("default", None)


def test_levers_cpu_reports_costs_and_program_shape(tmp_path):
  # benchmarks.levers on ResNet-20, its cheap sections (costs; the counts program lowered,
  # not compiled, at a tiny plan). What packing costs, by the arithmetic: a packed stage-1
  # convolution has g*I inputs and g*O outputs per row, so per row it does g^2 times one
  # sample's multiply-adds (the zero blocks of diag(W, ..., W) are multiplied too) and a row
  # carries g samples: g times the FLOPs per sample in stage 1, exactly; the later stages are
  # unchanged. Output elements per sample do not change (g*O channels over g samples).
  levers = _benchmark_module("levers")
  out = tmp_path / "levers.json"
  res = levers.levers(sections="costs,program", cost_models="resnet20", packs="1,2,4",
                      program_model="resnet20", program_num=64, program_batch=16,
                      compile_program=False, json=str(out))  # fmt: skip
  assert json.loads(out.read_text())["sections"] == ["costs", "program"]
  costs = {c["pack"]: c for c in res["costs"]}
  assert set(costs) == {1, 2, 4}
  base = {r["stage"]: r for r in costs[1]["stages"]}
  assert list(base) == ["stage1", "stage2", "stage3", "head"]
  assert base["stage1"]["flops_per_sample"] == 29_196_288  # stem 3->16 + 6 convs 16->16, 32x32
  for g in (2, 4):
    for r in costs[g]["stages"]:
      b = base[r["stage"]]
      factor = g if r["stage"] == "stage1" else 1
      assert r["flops_per_sample"] == factor * b["flops_per_sample"], (g, r["stage"])
      assert r["activation_elements_per_sample"] == b["activation_elements_per_sample"]
      by = r["activation_bytes_per_sample"]
      assert by["bf16"] * 2 == by["float32"] == 4 * r["activation_elements_per_sample"]
    assert costs[g]["first_stage_convs"] == {
      f"3x3 {3 * g}->{16 * g} /1 @32x32": 1,
      f"3x3 {16 * g}->{16 * g} /1 @32x32": 6,
    }
  programs = {(p["pack"], p["fold_bn"]): p["stablehlo"] for p in res["program"]}
  assert set(programs) == {(1, False), (1, True), (2, True)}
  for s in programs.values():
    assert s["conditional"] == 0 and s["convolution"] == 21 and s["while"] >= 1
  # Folded: bias add, (residual add), relu after each conv; batch norm adds subtract and multiply.
  assert programs[1, True]["rsqrt"] == 0
  assert programs[1, True]["activation_ops_per_gap"] < programs[1, False]["activation_ops_per_gap"]
  # The bias add first, then (residual) adds; the relu depends on JAX's lowering (a `relu`
  # call in 0.10; not among the counted ops in 0.12): no batch-norm subtract or multiply.
  folded = programs[1, True]["ops_between_convs"]
  assert folded and all(k.startswith("broadcast_in_dim > add") for k in folded), folded
  assert not any("subtract" in k or "multiply" in k for k in folded), folded
