"""``rsjax bench`` (``rsjax.app.bench``): FLOPs per sample against hand counts, the extrapolation
to the target N, the peaks tables, the rounds of a timing and their spread (the busy-machine
warning), the run's batch beside the best point of the sweep, the JSON and the plot of a tiny
run, the twin at rsjax's batch and at its own best one, one-line errors."""

import importlib.util
import json

import jax
import numpy as np
import pytest

from rsjax import models
from rsjax.app import cli
from rsjax.app.bench import costs, harness, peaks, report, rounds, run, sweep
from rsjax.app.launch.errors import RunError

# A test of the tools around the library: .ci/run runs it in the py311 stage only.
pytestmark = pytest.mark.tools

# A run small enough for a test: N 1000 measured at 64, n0 16, one timed image.
FAST = ["--N", "1000", "--N0", "16", "--measure-n", "64", "--images", "1", "--quiet"]
#: Seconds of a round in these tests (1 s in a real run): the rounds' logic, not the figures.
ROUND_S = 0.2


@pytest.fixture(autouse=True)
def short_rounds(monkeypatch):
  monkeypatch.setattr(rounds, "ROUND_S", ROUND_S)
  monkeypatch.setattr(run, "SWEEP_CALL_S", 0.1)  # a sweep's call: 0.5 s in a real run


def _lenet_hand_count() -> tuple[int, int]:
  """LeNet-5 at 28x28x1 (``rsjax.models.LeNet``): 2 x multiply-adds, output elements."""
  conv1 = 28 * 28 * 6 * (5 * 5 * 1)  # padding 2: 28x28 outputs, 6 channels
  conv2 = 10 * 10 * 16 * (5 * 5 * 6)  # after a 2x2 pool: 14x14 -> 10x10, 16 channels
  fc = 400 * 120 + 120 * 84 + 84 * 10
  elements = 28 * 28 * 6 + 10 * 10 * 16 + 120 + 84 + 10
  return 2 * (conv1 + conv2 + fc), elements


@pytest.mark.parametrize(
  "name, hand",
  [
    ("mlp", (2 * (784 * 256 + 256 * 256 + 256 * 10), 256 + 256 + 10)),
    ("lenet", _lenet_hand_count()),
  ],
)
def test_flops_per_sample_equal_the_hand_count(name, hand):
  model = models.create_model(name, num_classes=10, input_shape=(28, 28, 1), rngs=0)
  apply_fn, params = models.to_apply_fn(model)
  assert costs.op_costs(apply_fn, params, (28, 28, 1)) == hand
  assert costs.op_costs(apply_fn, params, (28, 28, 1), batch=3) == hand


def test_extrapolation_at_the_measured_samples_per_second():
  assert harness.extrapolate(0.5, 2_100, 100_100) == pytest.approx(0.5 * 100_100 / 2_100)
  t = harness.Throughput(
    precision="float32",
    batch=100,
    compile_s=1.0,
    first_call_s=1.5,
    timing=rounds.Rounds(calls=(1, 2, 1), seconds=(0.2, 0.6, 0.4), samples=2_100),
    images=2,
    target_samples=100_100,
    peak_memory={"bytes": None, "kind": "x"},
  )
  assert t.seconds == pytest.approx((0.2, 0.3, 0.4))
  assert t.seconds_per_image_measured == pytest.approx(0.3)  # the median round's
  assert t.samples_per_s == pytest.approx(2_100 / 0.3)
  assert t.seconds_per_image == pytest.approx(100_100 / (2_100 / 0.3))
  p = peaks.Peaks("x", 1e12, None, 4e12, 1e11, "test")
  f = harness.figures(t, 1e6, 1000, p)
  assert f["mfu"] == pytest.approx(1e6 * t.samples_per_s / 1e12)
  assert f["bound"]["compute_s"] == pytest.approx(1e6 * 100_100 / 1e12)
  assert f["bound"]["memory_s"] == pytest.approx(2.5 * 1000 * 4 * 100_100 / 1e11)
  assert f["bound_fraction"] == pytest.approx(f["bound"]["bound_s"] / t.seconds_per_image)
  assert harness.figures(t, 1e6, 1000, None)["mfu"] is None
  tf32 = harness.Throughput(**{**t.__dict__, "precision": "tf32"})
  assert harness.figures(tf32, 1e6, 1000, p)["mfu"] is None  # no TF32 unit: no MFU


class _FakeClock:
  """A clock that each timed call moves on by the next of ``durations`` seconds."""

  def __init__(self, durations):
    self.now, self.durations, self.calls = 0.0, iter(durations), []

  def __call__(self) -> float:
    return self.now

  def call(self, i: int) -> None:
    self.calls.append(i)
    self.now += next(self.durations)


def test_rounds_group_calls_until_a_round_is_long_enough(monkeypatch):
  monkeypatch.setattr(rounds, "ROUND_S", 1.0)
  # 0.4 s calls: three a round (1.2 s); the third round's calls are slower (0.6 s: two).
  clock = _FakeClock([0.4] * 6 + [0.6] * 2)
  r = rounds.time_rounds(clock.call, 100, clock=clock)
  assert r.calls == (3, 3, 2) and r.seconds == pytest.approx((1.2, 1.2, 1.2))
  assert clock.calls == list(range(8))  # every call its own index (the images in turn)
  d = r.as_dict()
  assert d["samples_per_s_min"] == pytest.approx(200 / 1.2)
  assert d["samples_per_s_max"] == pytest.approx(300 / 1.2)
  assert d["samples_per_s"] == d["samples_per_s_median"] == pytest.approx(300 / 1.2)
  assert d["spread"] == pytest.approx(1.5) and d["busy"]
  assert [x["calls"] for x in d["rounds"]] == [3, 3, 2]
  # A call longer than a round is a round; rounds go on until min_calls calls have run.
  clock = _FakeClock([2.0, 2.1, 2.2, 2.3, 2.4])
  r = rounds.time_rounds(clock.call, 10, min_calls=5, clock=clock)
  assert r.calls == (1,) * 5 and r.spread == pytest.approx(2.4 / 2.0)
  assert r.median == pytest.approx(10 / 2.2)


def test_rounds_more_than_20_percent_apart_are_busy():
  def spread(*seconds):
    return rounds.Rounds(calls=(1,) * len(seconds), seconds=seconds, samples=10)

  assert not spread(1.0, 1.1, 1.2).busy  # 1.2 exactly: not busy
  assert spread(1.0, 1.1, 1.21).busy
  quiet, loaded = spread(1.0, 1.05, 1.1).as_dict(), spread(1.0, 1.6, 1.35).as_dict()
  doc = {
    "results": [{"precision": "float32", **loaded}],
    "sweep": [
      {"precision": "float32", "batch": 32, **quiet},
      {"precision": "float32", "batch": 64, **loaded},
    ],
    "twin": [
      {
        "precision": "float32",
        "eager": {**quiet, "sweep": [{"batch": 32, **loaded}]},
        "compiled": {"mode": None, "tried": {}},
      }
    ],
  }
  assert report.busy_points(doc) == [
    ("float32 certify", pytest.approx(1.6)),
    ("sweep float32 batch 64", pytest.approx(1.6)),
    ("eager twin float32 batch 32", pytest.approx(1.6)),
  ]
  (line,) = report.busy_warning(doc)
  assert line.startswith("warning: busy machine: these figures are not to be trusted")
  assert "sweep float32 batch 64 1.60x" in line and "batch 32 1.60x" in line
  quiet_doc = {"results": [{"precision": "float32", **quiet}], "sweep": [], "twin": []}
  assert report.busy_warning(quiet_doc) == []


def test_the_run_batch_beside_the_best_point_of_the_sweep():
  points = [
    {"precision": "float32", "batch": b, "samples_per_s": v}
    for b, v in ((64, 9_000.0), (256, 12_000.0), (1000, 10_000.0))
  ]
  best = sweep.best_point(points, 1000, auto=True)
  assert best["best_batch"] == 256 and best["gain"] == pytest.approx(0.2)
  assert report.best_line(best) == (
    "batch 1000 (auto): 10,000 samples/s; best point batch 256: 12,000 samples/s (20% more)"
  )
  at_best = sweep.best_point(points, 256, auto=False)
  assert report.best_line(at_best) == (
    "batch 256 (--batch): 12,000 samples/s, the best point of the sweep"
  )
  unswept = sweep.best_point(points, 4096, auto=True)
  assert unswept["samples_per_s"] is None and unswept["gain"] is None
  assert "batch 4096 (auto): not in the sweep" in report.best_line(unswept)
  assert sweep.best_point([], 8, auto=True) is None
  # The run's batch is timed first (a sweep cut short by its budget still has it).
  assert sorted([8, 1, 32, 4], key=lambda b: (b != 32, b)) == [32, 1, 4, 8]


def test_measured_n_from_the_flops_and_the_peak():
  kw = dict(n0=100, target_n=100_000, cap=2000)
  assert harness.choose_measure_n(flops_per_sample=6e5, peak_flops=1e11, **kw) == 2000
  assert harness.choose_measure_n(flops_per_sample=3.6e9, peak_flops=1e11, **kw) == 50
  n = harness.choose_measure_n(flops_per_sample=8e7, peak_flops=1e11, **kw)
  assert n == 1400  # 0.3 x 1e11 / 8e7 x 4 s - 100 = 1400
  assert harness.choose_measure_n(flops_per_sample=8e7, peak_flops=None, **kw) == 2000
  small = {**kw, "target_n": 500}
  assert harness.choose_measure_n(flops_per_sample=1.0, peak_flops=1e11, **small) == 500


def test_published_peaks_by_device_kind():
  assert peaks.published_peaks("NVIDIA H100 80GB HBM3").name == "H100 SXM"
  assert peaks.published_peaks("NVIDIA A100-SXM4-80GB").bf16 == 312e12
  assert peaks.published_peaks("TPU v4").bandwidth == 1.2e12
  assert peaks.published_peaks("TPU v5 lite").name == "TPU v5e"
  assert peaks.published_peaks("TPU v5p").name == "TPU v5p"
  assert peaks.published_peaks("TPU v5").name == "TPU v5p"
  assert peaks.published_peaks("cpu") is None
  assert peaks.PUBLISHED["TPU v5e"].flops("tf32") is None
  assert peaks.PUBLISHED["H200"].flops("bfloat16") == peaks.PUBLISHED["H100"].flops("bf16")


def test_precisions_are_checked_against_the_device():
  cpu = jax.devices("cpu")[0]
  assert run.check_precisions(["fp32", "bf16", "float32"], cpu) == ("float32", "bfloat16")
  with pytest.raises(RunError, match="unknown precision 'fp16'"):
    run.check_precisions(["fp16"], cpu)
  with pytest.raises(RunError, match="has no TensorFloat-32"):
    run.check_precisions(["tf32"], cpu)


def test_bench_writes_every_figure_and_the_plot(tmp_path, capsys):
  out, png = tmp_path / "b.json", tmp_path / "b.png"
  argv = ["bench", "--arch", "mlp", *FAST, "--json", str(out), "--plot", str(png)]
  assert cli.main(argv) == 0
  text = capsys.readouterr().out
  assert "measured at N = 64, extrapolated" in text and "samples/s" in text
  doc = json.loads(out.read_text())
  assert doc["command"] == "rsjax " + " ".join(argv)
  assert doc["flops_per_sample"] == 2 * (784 * 256 + 256 * 256 + 256 * 10)
  assert doc["model"]["kind"] == "architecture (random weights)"
  assert {"platform", "device_kind", "cpu", "cores", "versions"} <= set(doc["machine"])
  assert doc["machine"]["versions"]["jax"] == jax.__version__
  assert doc["peaks"]["fp32"] > 0 and doc["peaks"]["bandwidth"] > 0  # the CPU probe
  (r,) = doc["results"]
  assert r["precision"] == "float32" and r["measured_n"] == 64 and r["extrapolated"]
  assert r["images"] == 1 and r["compile_s"] > 0 and r["peak_memory_bytes"] > 0
  assert "RSS" in r["peak_memory_kind"]
  assert r["samples_per_s"] == pytest.approx((16 + 64) / r["seconds_per_image_measured"])
  assert r["seconds_per_image"] == pytest.approx((16 + 1000) / r["samples_per_s"])
  assert r["mfu"] == pytest.approx(
    doc["flops_per_sample"] * r["samples_per_s"] / doc["peaks"]["fp32"]
  )
  assert r["bound"]["bound"] in ("compute", "memory") and 0 < r["bound_fraction"]
  assert doc["sweep"] and np.all(np.diff([p["batch"] for p in doc["sweep"]]) > 0)
  for p in [r, *doc["sweep"]]:  # every timing: 3 rounds of ROUND_S at least, their spread
    assert len(p["rounds"]) >= 3 and all(x["seconds"] >= ROUND_S for x in p["rounds"])
    low, mid, high = (p[f"samples_per_s_{k}"] for k in ("min", "median", "max"))
    assert 0 < low <= mid <= high and p["samples_per_s"] == mid
    assert p["spread"] == pytest.approx(high / low) and p["busy"] == (p["spread"] > 1.2)
  (best,) = doc["sweep_best"]
  assert best["batch"] == r["batch"] and best["auto"]
  assert best["best_samples_per_s"] == max(p["samples_per_s"] for p in doc["sweep"])
  assert report.best_line(best) in text
  busy = [b["what"] for b in doc["busy"]]
  assert ("warning: busy machine: these figures are not to be trusted" in text) == bool(busy)
  assert ("float32 certify" in busy) == r["busy"]
  assert png.stat().st_size > 0 and doc["plot"] == str(png)


def test_bench_of_a_model_directory_behind_a_denoiser(tmp_path, capsys):
  """A model directory as ``rsjax convert`` writes one, with a small DnCNN in front (the
  denoiser pipeline), at two precisions; --pack on a model without a narrow stage is a note."""
  from rsjax.models.denoise import workdir

  model = models.create_model("mlp", num_classes=10, input_shape=(8, 8, 1), rngs=0)
  config = {"model": "mlp", "num_classes": 10, "input_shape": [8, 8, 1]}
  models.save_model(tmp_path / "m", model, config)
  kwargs = {"channels": 1, "depth": 2, "features": 4}
  denoiser = workdir.build_denoiser("dncnn", kwargs)
  workdir.save_denoiser(
    tmp_path / "d", denoiser, {"kind": "dncnn", "model_kwargs": kwargs, "input_shape": [8, 8, 1]}
  )
  argv = ["bench", str(tmp_path / "m"), "--denoiser", str(tmp_path / "d"), *FAST]
  more = ["--precision", "fp32,bf16", "--pack", "2", "--json", str(tmp_path / "j")]
  assert cli.main([*argv, *more]) == 0
  out = capsys.readouterr().out
  assert "behind the denoiser" in out and "note: --pack 2:" in out and "runs unpacked" in out
  doc = json.loads((tmp_path / "j").read_text())
  assert [r["precision"] for r in doc["results"]] == ["float32", "bfloat16"]
  assert doc["model"]["pack"] == 1 and doc["model"]["sigma"] == 0.25


@pytest.mark.parametrize(
  "argv, needle",
  [
    (["bench", "nosuchmodel"], "unknown model 'nosuchmodel'"),
    (["bench", "--arch", "nosuchnet"], "unknown model 'nosuchnet'"),
    (["bench", "--arch", "lenet", "--precision", "fp16"], "unknown precision 'fp16'"),
    (["bench", "--arch", "lenet", "--precision", "tf32"], "has no TensorFloat-32"),
    (["bench"], "give one model"),
    (["bench", "--arch", "lenet", "--resize", "32"], "--resize needs --input-shape"),
  ],
)
def test_errors_are_one_line(argv, needle, capsys):
  assert cli.main(argv) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and needle in err, err


def test_twin_without_torch_says_so(monkeypatch, capsys):
  real = importlib.util.find_spec
  monkeypatch.setattr(
    importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a)
  )
  assert cli.main(["bench", "--arch", "lenet", "--twin", *FAST]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "--twin needs PyTorch, which is not installed" in err, err


def test_a_model_without_a_twin_says_so(capsys):
  pytest.importorskip("torch")
  argv = ["bench", "--arch", "deq", "--input-shape", "8,8,1", "--num-classes", "3", "--twin"]
  assert cli.main([*argv, *FAST]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "no PyTorch twin of DEQClassifier" in err, err


def test_the_twin_is_timed_as_rsjax_was(tmp_path, monkeypatch, capsys):
  """``--twin``: the same network and weights in PyTorch (logits checked first), timed at the
  rsjax run's batch, N and images; the JSON has both and rsjax's speed-up over the twin."""
  pytest.importorskip("torch")
  monkeypatch.setattr(sweep, "MAX_POINTS", 3)
  out = tmp_path / "t.json"
  argv = ["bench", "--arch", "lenet", "--twin", "--twin-compile", "none", "--batch", "32"]
  assert cli.main([*argv, *FAST, "--json", str(out)]) == 0
  doc = json.loads(out.read_text())
  (ours,), (twin,) = doc["results"], doc["twin"]
  assert twin["precision"] == ours["precision"] == "float32" and twin["batch"] == 32
  assert twin["logits"]["argmax_agree"] == 1.0
  assert twin["logits"]["max_abs_diff"] <= 1e-4 * max(twin["logits"]["logit_scale"], 1.0)
  eager = twin["eager"]
  assert ours["images"] == 1 and twin["compiled"] is None
  assert len(eager["seconds_measured"]) == len(eager["rounds"]) >= 3
  speedup = eager["seconds_per_image_measured"] / ours["seconds_per_image_measured"]
  assert eager["rsjax_speedup"] == pytest.approx(speedup, rel=1e-12)
  assert eager["samples_per_s_min"] <= eager["samples_per_s_median"] <= eager["samples_per_s_max"]

  # --twin sweeps both sides over the same batches (rsjax's sweep, up to the run's batch 32).
  # (the twin's largest batch first, until the sweep's time budget is spent).
  swept = [p["batch"] for p in eager["sweep"]]
  assert set(swept) <= {p["batch"] for p in doc["sweep"]} and swept[-1] == 32
  assert doc["sweep"][-1]["batch"] == 32
  top = max(eager["sweep"], key=lambda p: p["samples_per_s"])
  assert eager["best"] == {"batch": top["batch"], "samples_per_s": top["samples_per_s"]}
  mine = max(doc["sweep"], key=lambda p: p["samples_per_s"])
  assert twin["rsjax_best"]["samples_per_s"] == mine["samples_per_s"]
  ratio = mine["samples_per_s"] / top["samples_per_s"]
  assert eager["rsjax_best_ratio"] == pytest.approx(ratio, rel=1e-12)
  text = capsys.readouterr().out
  assert "PyTorch twin, float32, at rsjax's batch 32: eager" in text
  assert f"(rsjax best / twin best {ratio:.2f}x)" in text


def test_the_compiled_twin_at_its_best_batches(tmp_path, monkeypatch, capsys):
  """The compiled twin at the smallest settings that compile it (MLP, batch 8, N 16, float32,
  one ``torch.compile`` mode): timed at rsjax's batch and swept over the eager twin's best
  batches (two here), compiled once for all of them."""
  pytest.importorskip("torch")
  monkeypatch.setattr(sweep, "MAX_POINTS", 2)
  out = tmp_path / "t.json"
  argv = ["bench", "--arch", "mlp", "--twin", "--twin-compile", "default", "--batch", "8"]
  small = ["--N", "100", "--N0", "8", "--measure-n", "16", "--images", "1", "--quiet"]
  assert cli.main([*argv, *small, "--json", str(out)]) == 0
  (twin,) = json.loads(out.read_text())["twin"]
  compiled = twin["compiled"]
  if compiled["mode"] is None:
    pytest.skip(f"torch.compile cannot run here: {compiled['tried']}")
  assert compiled["mode"] == "default" and compiled["compile_s"] > 0
  assert sorted(p["batch"] for p in compiled["sweep"]) == [4, 8]
  assert compiled["rsjax_speedup"] > 0 and compiled["rsjax_best_ratio"] > 0
  assert compiled["best"]["batch"] in (4, 8)
  assert "compiled twin batch" in capsys.readouterr().out


def test_the_machine_record_names_the_cpu_extensions(tmp_path):
  # The same model string ("Intel(R) Xeon(R) Processor") hid a CPU with AMX one session and one
  # without the next; the record keeps the extensions that decide the kernels.
  from rsjax.app.bench.machine import cpu_isa

  x86, arm, other = tmp_path / "x86", tmp_path / "arm", tmp_path / "other"
  x86.write_text("model name\t: X\nflags\t\t: fpu sse avx2 fma avx512f avx512_fp16 amx_tile\n")
  arm.write_text("Features\t: fp asimd sve i8mm crc32\n")
  other.write_text("processor\t: 0\n")
  assert cpu_isa(str(x86)) == ["amx_tile", "avx2", "avx512_fp16", "avx512f", "fma"]
  assert cpu_isa(str(arm)) == ["asimd", "i8mm", "sve"]
  assert cpu_isa(str(other)) is None and cpu_isa(str(tmp_path / "none")) is None
  assert report.isa_summary(cpu_isa(str(x86))) == "AVX-512, AMX"
  assert report.isa_summary(["avx2", "fma"]) == "AVX2"
  assert report.isa_summary(cpu_isa(str(arm))) == "NEON, SVE"
  assert report.isa_summary(None) == "" and report.isa_summary(["avx512f", "amx_tile"]) == (
    "AVX-512, AMX"
  )
  machine = {"platform": "cpu", "device_kind": "cpu", "cpu": "X", "cores": 2}
  doc = {"machine": {**machine, "cpu_isa": ["avx2", "avx512f"]}, "peaks": None}
  assert report._peaks_line(doc).startswith("device: cpu, X (AVX-512), 2 cores;")
  assert report._peaks_line({"machine": machine, "peaks": None}).startswith("device: cpu, X, 2")
