"""Figures that cannot drift: the numbers the docs quote, read from their JSON.

Issue 55, item 3. Every figure ``benchmarks/RESULTS.md`` and the site's pages (``docs/``)
quote from a benchmark or an experiment is bound here to the committed JSON it
came from (under ``benchmarks/results/`` or ``results/``):

* ``Bind(doc, template, json, figures)``: ``template`` is the quoted text as
  it stands in the document, with ``{}`` where each figure is; it must match
  exactly one line of ``doc``. ``figures`` gives, per ``{}`` in order, a key
  path into the JSON and the rounding the prose uses (``fmt``: a format spec,
  applied to the JSON value times ``scale``). The test formats the JSON value
  and requires the quoted text to be exactly that string.
* Key paths: ``a/b/0/c`` walks dicts and lists; ``results[model=lenet,
  precision=bf16]`` picks the one element of a list whose fields are those
  values (exactly one must match). ``Ratio(p, q)`` is the JSON value at ``p``
  over the one at ``q``.
* ``UNBOUND``: figures the docs quote that no committed JSON holds (machine
  timings printed by a command, values computed by a library function, runs
  whose output was not kept), each with its reason or the command that printed
  it. The test checks that each still stands in its document, so the list is
  kept when the prose changes.

No JAX: only the markdown and the JSON are read.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
from collections.abc import Callable

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
R = "benchmarks/RESULTS.md"
# The site's pages (issue 58: the README's long sections moved there).
INSTALL = "docs/guides/install.md"
START = "docs/getting-started.md"
VERIFY = "docs/guides/verify-audit.md"
DENOISED = "docs/tutorials/denoised.md"
BENCH_DOC = "docs/guides/bench.md"
REPRO = "docs/guides/reproducibility.md"
RECERTIFY = "docs/guides/recertify.md"
B = "benchmarks/results/"

NUMBER = r"([-+]?(?:\d[\d,]*)?\.?\d+(?:e[-+]?\d+)?)"


@dataclasses.dataclass(frozen=True)
class Ratio:
  num: str
  den: str


@dataclasses.dataclass(frozen=True)
class F:
  """One figure: where it is in the JSON and how the prose rounds it."""

  key: str | Ratio
  fmt: str | Callable[[float], str]
  scale: float = 1.0


@dataclasses.dataclass(frozen=True)
class Bind:
  doc: str
  template: str
  json: str
  figures: tuple[F, ...]


def _f(spec, scale=1.0):
  return lambda key: F(key, spec, scale)


s3 = _f("#.3g")  # three significant digits, zeros kept: 0.560, 3.18, 0.0312
f1, f2, f3 = _f(".1f"), _f(".2f"), _f(".3f")
comma = _f(",.0f")  # 11,922
mflop = _f(".2f", 1e-6)
kib = _f(".1f", 1 / 1024)
pct0 = _f(".0f", 100.0)  # a share quoted as "77%"


# ---------------------------------------------------------------------------
# The key paths.

_SELECT = re.compile(r"^(?P<name>[^\[]*)\[(?P<sel>[^\]]*)\]$")


def _scalar(text):
  for cast in (int, float):
    try:
      return cast(text)
    except ValueError:
      pass
  return {"true": True, "false": False, "none": None}.get(text.lower(), text)


def lookup(data, path):
  """The value at ``path`` (see the module docstring); KeyError names the part."""
  node = data
  for part in path.split("/"):
    m = _SELECT.match(part)
    name, sel = (m["name"], m["sel"]) if m else (part, None)
    if name:
      if isinstance(node, list):
        if not name.isdigit() or int(name) >= len(node):
          raise KeyError(f"{part!r} (a list of {len(node)})")
        node = node[int(name)]
      elif isinstance(node, dict) and name in node:
        node = node[name]
      else:
        raise KeyError(f"{name!r}")
    if sel is not None:
      want = dict(kv.split("=", 1) for kv in sel.split(","))
      hits = [
        e
        for e in node
        if isinstance(e, dict)
        and all(str(e.get(k)) == v or e.get(k) == _scalar(v) for k, v in want.items())
      ]
      if len(hits) != 1:
        raise KeyError(f"[{sel}] matches {len(hits)} elements, not 1")
      node = hits[0]
  return node


def expected(data, fig):
  if isinstance(fig.key, Ratio):
    value = lookup(data, fig.key.num) / lookup(data, fig.key.den)
  else:
    value = lookup(data, fig.key)
  scaled = value * fig.scale if fig.scale != 1.0 else value
  return value, fig.fmt(scaled) if callable(fig.fmt) else format(scaled, fig.fmt)


# ---------------------------------------------------------------------------
# The bound figures.


def _gpu_row(label, model, precision, s_fmt="{}"):
  sel = f"results[model={model},precision={precision}]"
  return Bind(
    R,
    f"| {label} | {precision} | {s_fmt} ({{}}) | {{}} | "
    + ("**{}x**" if model == "lenet" else "{}x")
    + " | {} / {} | {} |",
    B + "gpu.json",
    (
      s3(f"{sel}/rsjax/seconds_per_image"),
      s3(f"{sel}/rsjax/seconds_per_image_p50"),
      s3(f"{sel}/twin/seconds_per_image"),
      f2(f"{sel}/ratio_to_twin"),
      comma(f"{sel}/rsjax/peak_memory_mb"),
      comma(f"{sel}/twin/peak_memory_mb"),
      f3(f"{sel}/mfu"),
    ),
  )


def _levers_costs_row(label, model, pack):
  sel = f"costs[model={model},pack={pack}]"
  stage = f"{sel}/stages[stage={{}}]/flops_per_sample"
  figures = [
    mflop(stage.format("stage1")),
    mflop(stage.format("stage2")),
    mflop(stage.format("stage3")),
    mflop(f"{sel}/total/flops_per_sample"),
    f2(
      Ratio(f"{sel}/total/flops_per_sample", f"costs[model={model},pack=1]/total/flops_per_sample")
    ),
  ]
  template = f"| {label} | {pack} | {{}} | {{}} | {{}} | {{}} ({{}}) |"
  if pack == 1:
    template += " {} ({}) / {} ({}) / {} ({}) / {} ({}) |"
    for where in [f"{sel}/stages[stage=stage{i}]" for i in (1, 2, 3)] + [f"{sel}/total"]:
      figures += [
        kib(f"{where}/activation_bytes_per_sample/bf16"),
        kib(f"{where}/activation_bytes_per_sample/float32"),
      ]
  return Bind(R, template, B + "levers_cpu.json", tuple(figures))


BOUND: list[Bind] = [
  # RESULTS.md, issue 52: lever 1, FLOPs and bytes per sample by stage.
  *[
    _levers_costs_row(label, model, pack)
    for label, model in (("ResNet-110", "resnet110"), ("ResNet-20", "resnet20"))
    for pack in (1, 2, 4)
  ],
  # RESULTS.md, issue 43: the GPU suite on an H200.
  *[
    _gpu_row(label, model, precision)
    for label, model in (("LeNet", "lenet"), ("ResNet-20", "resnet20"), ("ResNet-110", "resnet110"))
    for precision in ("fp32", "tf32", "bf16")
  ],
  # RESULTS.md, issue 66 item 2: rsjax against the twin, each at its best batch, quiet.
  *[
    Bind(
      R,
      f"| {label} | {{}} ({{}}) | {{}} ({{}}): rsjax {{}}x | {{}} ({{}}) | **{{}}x** |",
      B + f"twin_cpu_quiet/{model}.json",
      (
        comma("twin/0/rsjax_best/samples_per_s"),
        _f("d")("twin/0/rsjax_best/batch"),
        comma("twin/0/eager/best/samples_per_s"),
        _f("d")("twin/0/eager/best/batch"),
        f2("twin/0/eager/rsjax_best_ratio"),
        comma("twin/0/compiled/best/samples_per_s"),
        _f("d")("twin/0/compiled/best/batch"),
        f2("twin/0/compiled/rsjax_best_ratio"),
      ),
    )
    for label, model in (("LeNet", "lenet"), ("ResNet-20", "resnet20"))
  ],
  Bind(
    R,
    "samples, median):** rsjax's noise {}, forward {}, counting {}, whole pass {}; the compiled",
    B + "cpu_profile_lenet_quiet.json",
    tuple(
      f1(f"models/lenet/batches/1000/sides/rsjax/times/{t}/median")
      for t in ("noise", "forward", "count", "pass")
    ),
  ),
  Bind(
    R,
    "twin's noise {}, forward {}, pass {}. The noise draw is near the twin's (Threefry at 1.2x",
    B + "cpu_profile_lenet_quiet.json",
    tuple(
      f1(f"models/lenet/batches/1000/sides/compiled@2/times/{t}/median")
      for t in ("noise", "forward", "pass")
    ),
  ),
  Bind(
    R,
    "convolution {}, ReLU + pool {}, the 6 -> 16 convolution {}, ReLU + pool {}, the dense",
    B + "cpu_lenet_layers.json",
    tuple(f1(f"ms_per_1000/{k}/median") for k in ("conv1", "relu_pool1", "conv2", "relu_pool2")),
  ),
  Bind(
    R,
    "layers {}; the whole forward {}. The two convolutions are three quarters of it. The second",
    B + "cpu_lenet_layers.json",
    (f1("ms_per_1000/fc/median"), f1("ms_per_1000/forward/median")),
  ),
]


def _objective_row(label, key):
  k = f"objectives/{key}"
  return Bind(
    R,
    f"| {label} | {{}} | {{}} | {{}} |",
    B + "objectives.json",
    (f1(f"{k}/ms_per_step"), f2(f"{k}/ratio_vs_gaussian_same_m"), f2(f"{k}/ratio_vs_gaussian_m1")),
  )


RECERTIFY_CHILDREN = (
  ("bf16 (`--precision bfloat16`)", "bf16"),
  ("int8 weights", "int8"),
  ("pruned 50%, `--fallback`", "prune"),
  ("pruned 90%, `--fallback`", "prune90"),
  ("fine-tuned 1 epoch, `--fallback`", "tuned"),
)


RECERTIFY_SHORT = (
  ("bf16", "bf16"),
  ("int8", "int8"),
  ("pruned 50%", "prune"),
  ("pruned 90%", "prune90"),
  ("fine-tuned", "tuned"),
)


def _recertify_row(sigma, label, key):
  """A row of RESULTS.md's recertify table: images, zeta, samples, ratio, seconds and the
  certified accuracy (%) recertified / from scratch at each radius of the grid."""
  k = f"sigma={sigma}/{key}"
  acc = [
    pct0(f"{k}/{side}/accuracy/{r}")
    for r in ("0", "0.25", "0.5", "0.75", "1")
    for side in ("recertify", "scratch")
  ]
  return Bind(
    R,
    f"| {sigma} | {label} | {{}} | {{}} | {{}} / {{}} | {{}}x | {{}} / {{}} |" + " {} / {} |" * 5,
    B + "recertify.json",
    (
      _f("d")(f"{k}/images"),
      _f(".5f")(f"{k}/zeta_upper_mean"),
      comma(f"{k}/recertify/samples_per_image"),
      comma(f"{k}/scratch/samples_per_image"),
      f2(f"{k}/sample_ratio"),
      f1(f"{k}/recertify/seconds_per_image"),
      f1(f"{k}/scratch/seconds_per_image"),
      *acc,
    ),
  )


BOUND += [
  # RESULTS.md, issue 42: Carlini et al.'s pipeline on the CPU.
  *[
    Bind(
      R,
      f"| {label} | {{}} | {{}},000 ({{}} h) | {{}} s |",
      B + "denoised_carlini_cpu.json",
      (
        f2(f"{side}/samples_per_s"),
        _f(".0f", 1e-3)(f"s_per_image_at_N100000/{side}"),
        _f(".0f", 1 / 3600)(f"s_per_image_at_N100000/{side}"),
        f1(f"{side}/first_call_s"),
      ),
    )
    for label, side in (("rsjax (JAX 0.10.2)", "rsjax"), ("PyTorch reference", "torch"))
  ],
  Bind(R, "| ratio | **{}x** | | |", B + "denoised_carlini_cpu.json", (f2("rsjax_over_torch"),)),
  Bind(
    R,
    "The improved-diffusion CIFAR-10 UNet ({} parameters, one step at sigma = 0.25: t* = {}",
    B + "denoised_carlini_cpu.json",
    (_f(",d")("unet_params"), _f("d")("rsjax/timestep")),
  ),
  Bind(
    R,
    "({} parameters), random weights built in PyTorch",
    B + "denoised_carlini_cpu.json",
    (_f(",d")("classifier_params"),),
  ),
  # RESULTS.md, issue 13: cost of each training objective.
  *[
    _objective_row(label, key)
    for label, key in (
      ("Gaussian m=1", "gaussian m=1"),
      ("Gaussian m=4", "gaussian m=4"),
      ("Consistency m=4", "consistency m=4"),
      ("SmoothAdv m=4, 2 PGD steps", "smoothadv m=4, 2 steps"),
      ("MACER m=4", "macer m=4"),
      ("Gaussian + sphere attack m=4, T=4", "gaussian+sphere attack m=4, T=4"),
    )
  ],
  # RESULTS.md and the recertify guide, issue 56: recertify against from scratch.
  *[
    _recertify_row(sigma, label, key)
    for sigma in ("0.25", "0.5")
    for label, key in RECERTIFY_CHILDREN
  ],
  *[
    Bind(
      R,
      f"| {sigma} | {short}, 20,000 from scratch | {{}} |" + " {} |" * 5,
      B + "recertify.json",
      (
        _f("d")(f"sigma={sigma}/{key}/scratch_same_samples/images"),
        *[
          pct0(f"sigma={sigma}/{key}/scratch_same_samples/accuracy/{r}")
          for r in ("0", "0.25", "0.5", "0.75", "1")
        ],
      ),
    )
    for sigma in ("0.25", "0.5")
    for short, key in RECERTIFY_SHORT
  ],
  *[
    Bind(
      R,
      f"| {sigma} | {short} | {{}} | {{}} at r {{}} | {{}} | {{}} |",
      B + "recertify.json",
      (
        _f(".0f")(f"sigma={sigma}/{key}/max_gap_points"),
        _f(".0f")(f"sigma={sigma}/{key}/max_fine_gap_points"),
        f2(f"sigma={sigma}/{key}/max_fine_gap_radius"),
        f2(f"sigma={sigma}/{key}/recertify/fallback_share"),
        comma(f"sigma={sigma}/{key}/recertify/samples_max_row"),
      ),
    )
    for sigma in ("0.25", "0.5")
    for short, key in RECERTIFY_SHORT
  ],
  *[
    Bind(
      R,
      f"| radius cap, sigma {sigma} | {{}} | {{}} | {{}} | {{}} |",
      B + "recertify.json",
      tuple(
        f2(f"sigma={sigma}/{c}")
        for c in ("cap_scratch", "cap_recertify", "cap_scratch_same_samples", "cap_child_samples")
      ),
    )
    for sigma in ("0.25", "0.5")
  ],
  Bind(
    RECERTIFY,
    "count is 0 gets radius {} at most, against {} from scratch; no certificate at level alpha",
    B + "recertify.json",
    (f2("sigma=0.25/cap_recertify"), f2("sigma=0.25/cap_scratch")),
  ),
  Bind(
    RECERTIFY,
    "n samples of the child can certify beyond `sigma Phi^-1(alpha^(1/n))` ({} at 0.001).",
    B + "recertify.json",
    (f2("sigma=0.25/cap_child_samples"),),
  ),
]


RECERTIFY_RUNS = "results/recertify_full.json"


def _mark(r: dict) -> str:
  """``≤ `` where from scratch reached the ACR at its smallest n_p already, ``≥ `` where it
  never did on its grid (``experiments/recertify_mnist.py``'s ``ratio_at_equal_acr``)."""
  return "≥ " if r["at_least"] else "≤ " if r["at_most"] else ""


def _recertify_row(sigma, child, n, how, runs=RECERTIFY_RUNS, label=None):
  """A row of the recertify guide's tables of the paper's measure (issue 73): a fresh-noise
  child (``how="recertify"``) or a replayed one (``"replay"``), its child shown as ``label``."""
  k = f"sigma={sigma}/{child}"
  re_, sc = f"{k}/{how}/{n}", f"{k}/scratch/{n}"
  r = json.loads((ROOT / runs).read_text())[f"sigma={sigma}"][child][how][str(n)]
  keys = ("time_ratio_at_equal_acr", "pass_ratio_at_equal_acr")
  if how == "recertify":
    keys += ("replay_pass_ratio_at_equal_acr",)
  ratios = "".join(f" {_mark(r[key])}{{}}x |" for key in keys)
  return Bind(
    RECERTIFY,
    f"| {sigma} | {label or child}{' replayed' * (how == 'replay')} | {n:,} | {{}} / {{}} | "
    "{} | {} / {} |" + ratios,
    runs,
    (
      f3(f"{re_}/acr"),
      f3(f"{sc}/acr"),
      f2(f"{re_}/switched_share"),
      f2(f"{re_}/seconds_per_image"),
      f2(f"{sc}/seconds_per_image"),
      *(f2(f"{re_}/{key}/ratio") for key in keys),
    ),  # fmt: skip
  )


BOUND += [
  _recertify_row(sigma, child, n, how)
  for how in ("recertify", "replay")
  for sigma in ("1", "0.25", "0.5")
  for child in ("int8", "bf16")
  for n in (1000, 4000)
]
BOUND += [
  _recertify_row(
    sigma, child, 1000, how, "results/recertify_cifar_shaped_quick.json", f"ResNet-20 {child}"
  )  # fmt: skip
  for how in ("recertify", "replay")
  for child in ("int8", "bf16")
  for sigma in ("1", "0.25", "0.5")
]


def _sound_speed_row(label, model):
  sel = f"speed[model={model}]"
  return Bind(
    R,
    f"| {label} | {{}} | {{}} | {{}} | {{}} | {{}} |",
    B + "sound_noise_speed_cpu.json",
    (
      _f(",d")(f"{sel}/num"),
      _f(",d")(f"{sel}/batch_size"),
      comma(f"{sel}/samples_per_s/gaussian"),
      comma(f"{sel}/samples_per_s/gaussian_8bit"),
      f2(f"{sel}/sound_over_float"),
    ),
  )


def _sound_accuracy_row(sigma, label, noise):
  sel = f"accuracy[sigma={sigma}]/{noise}"
  return Bind(
    R,
    f"| {sigma} | {label} |" + " {} |" * 6,
    B + "sound_noise_cpu.json",
    (
      *[f2(f"{sel}/certified_accuracy/{r}") for r in ("0", "0.25", "0.5", "0.75", "1")],
      f2(f"{sel}/abstain"),
    ),
  )


BOUND += [
  # RESULTS.md, issue 41: sound 8-bit noise, speed and accuracy.
  *[
    _sound_speed_row(label, model)
    for label, model in (("MLP", "mlp"), ("LeNet", "lenet"), ("ResNet-20", "resnet20"))
  ],
  *[
    _sound_accuracy_row(sigma, label, noise)
    for sigma in ("0.25", "0.5")
    for label, noise in (("float Gaussian", "gaussian"), ("sound 8-bit", "gaussian_8bit"))
  ],
]


BOUND += [
  Bind(
    R,
    "`sound_noise_cpu.json`) gave {} / {} / {} for MLP / LeNet / ResNet-20",
    B + "sound_noise_cpu.json",
    tuple(f2(f"speed[model={m}]/sound_over_float") for m in ("mlp", "lenet", "resnet20")),
  ),
]


# Issue 71: PyTorch modules as they are against the eager modules (torch_module_cpu.json: quiet).
TORCH_MODULE = "docs/guides/torch-module.md"
TM = "benchmarks/results/torch_module_cpu.json"
BOUND += [
  Bind(
    TORCH_MODULE,
    f"| {label} | {{}} | {{}} | {{}}x |",
    TM,
    (
      comma(f"arms/{i}/results/0/samples_per_s"),
      comma(f"arms/{i}/twin/0/eager/samples_per_s"),
      f2(f"arms/{i}/twin/0/eager/rsjax_speedup"),
    ),
  )
  for i, label in enumerate(
    ("WideResNet-16-4 (785 MFLOP per sample)", "ViT (15.3 MFLOP per sample)")
  )
]
BOUND += [
  Bind(
    TORCH_MODULE,
    "Each at its best batch of the sweep: WideResNet-16-4 rsjax {} samples/s against the eager",
    TM,
    (comma("arms/0/sweep_best/0/best_samples_per_s"),),
  ),
  Bind(
    TORCH_MODULE,
    "module's {} ({}x); ViT {} against {} ({}x).",
    TM,
    (
      comma("arms/0/twin/0/eager/best/samples_per_s"),
      f2("arms/0/twin/0/eager/rsjax_best_ratio"),
      comma("arms/1/sweep_best/0/best_samples_per_s"),
      comma("arms/1/twin/0/eager/best/samples_per_s"),
      f2("arms/1/twin/0/eager/rsjax_best_ratio"),
    ),
  ),
]


TM_BUSY = "benchmarks/results/torch_module_cpu_busy.json"
BOUND += [
  Bind(
    TORCH_MODULE,
    f"{label}, batch 100: rsjax {{}} samples/s against the eager module's {{}} ({{}}x; {{}}x at",
    TM_BUSY,
    (
      comma(f"arms/{i}/results/0/samples_per_s"),
      comma(f"arms/{i}/twin/0/eager/samples_per_s"),
      f2(f"arms/{i}/twin/0/eager/rsjax_speedup"),
      f2(f"arms/{i}/twin/0/eager/rsjax_best_ratio"),
    ),
  )
  for i, label in enumerate(("WideResNet-16-4", "ViT"))
]


TM_RERUN = "benchmarks/results/torch_module_cpu_rerun.json"
BOUND += [
  Bind(
    TORCH_MODULE,
    f"{label} at batch 100: rsjax {{}} samples/s, the eager module {{}} ({{}}x; {{}}x at the best",
    TM_RERUN,
    (
      comma(f"arms/{i}/results/0/samples_per_s"),
      comma(f"arms/{i}/twin/0/eager/samples_per_s"),
      f2(f"arms/{i}/twin/0/eager/rsjax_speedup"),
      f2(f"arms/{i}/twin/0/eager/rsjax_best_ratio"),
    ),
  )
  for i, label in enumerate(("WideResNet-16-4", "ViT"))
]


DEMO = (
  "printed by `time rsjax demo --out runs/demo --quiet` (timed on the machine, not from a JSON)"
)
BENCH = (
  "printed by `rsjax bench --arch lenet --precision float32,bf16 --cache-dir off --json "
  "runs/bench/lenet.json --plot runs/bench/lenet.png` (timed on the machine; its JSON is not committed)"
)
BENCH_RUNS = "wall time of `rsjax bench` at its defaults with `--json --plot` (timed on the machine, not from a JSON)"
TWIN = (
  "printed by `rsjax bench --arch lenet --twin --N 10000 --measure-n 2000 --images 2` "
  "(timed on the machine, not from a JSON)"
)

# Quoted figures no committed JSON holds: (document, text as quoted, why / the command that printed it).
UNBOUND: list[tuple[str, str, str]] = [
  # the site's pages (docs/)
  (
    INSTALL,
    "688 passed",
    "test-suite run of `bash .ci/run` (timed, not from a JSON)",
  ),
  (
    INSTALL,
    "and 2 skipped in 16 min 33 s; Python 3.12, 636 passed and 28 skipped",
    "test-suite run of `bash .ci/run`",
  ),
  (START, "VM with JAX 0.10.2 on CPU (4 min 13 s in all,", DEMO),
  (START, "training 55 s + 57 s, certification 79 s + 56 s", DEMO),
  (START, "3 min 14 s on the idle VM before", DEMO),
  (
    START,
    "sigma=0.25  0.990*  0.940*  0.890*  0.790*   0.000   0.000   0.000  0.723    0.000  100",
    DEMO,
  ),
  (
    START,
    "sigma=0.5    0.940   0.890   0.850   0.770  0.640*  0.490*  0.260*  1.088    0.020  100",
    DEMO,
  ),
  (START, "envelope     0.990   0.940   0.890   0.790   0.640   0.490   0.260", DEMO),
  (
    START,
    "no radius can exceed 3.2 sigma (0.80 at sigma 0.25)",
    "arithmetic: sigma Phi^-1(0.001^(1/10,000)), no run",
  ),
  (
    VERIFY,
    "`rsjax verify` took 0.42 s of wall time",
    "timed by `benchmarks/configs/verify_speed.py` (not from a JSON)",
  ),
  (
    DENOISED,
    "t* = 145 at sigma 0.25 and 259 at 0.5",
    "computed by `rsjax.models.denoise.diffusion`, checked by tests/test_tutorial_prose.py",
  ),
  (
    TORCH_MODULE,
    "the ViT's forward ran 470 samples/s instead of 556",
    "a forward-only timing of run_graph with and without channels_last (not from a JSON)",
  ),
  (
    TORCH_MODULE,
    "`from_torch_module` ran its forward at 0.88x the speed of `from_torch`'s (109 against 124",
    "a forward-only timing of both conversions of one module, jitted (not from a JSON)",
  ),
  (BENCH_DOC, "FLOPs per sample: 833 kFLOP", BENCH),
  (BENCH_DOC, "`--arch lenet` 28 s", BENCH_RUNS),
  (
    BENCH_DOC,
    "(18,987 samples/s), `--arch resnet20` 45 s (840 samples/s, measured at N = 2,000)",
    BENCH_RUNS,
  ),
  (
    BENCH_DOC,
    "224, 3.63 GFLOP per sample) 54 s (25 samples/s, measured at N = 50: 1.1 hours per image",
    BENCH_RUNS,
  ),
  (
    BENCH_DOC,
    "a DnCNN denoiser (`rsjax train-denoiser --objective",
    BENCH_RUNS,
  ),
  (BENCH_DOC, "rsjax 2.59 s/image at N = 10,000, the eager", TWIN),
  (
    BENCH_DOC,
    "the compiled twin (`max-autotune-no-cudagraphs`, 90 s to compile) 1.2x faster (0.82x)",
    TWIN,
  ),
  (
    REPRO,
    "4.6e-6 (DDRS's objective)",
    "golden outputs across instruction sets (tests/golden_cases.py --check), no JSON",
  ),
  (
    REPRO,
    "which changed counts by up to 2 in 100,000",
    "an H100 run of issue 25, no committed JSON",
  ),
  (
    DENOISED,
    "The paper reports 88.1% clean accuracy on CIFAR-10",
    "Carlini et al.'s figure, not measured here",
  ),
  (
    DENOISED,
    "a CIFAR-10 image costs about 121 s on an A100 by the",
    "Carlini et al.'s figure, not measured here",
  ),
]


# ---------------------------------------------------------------------------
# The checks.

_DOCS: dict[str, list[str]] = {}
_JSONS: dict[str, object] = {}


def _doc(name):
  if name not in _DOCS:
    _DOCS[name] = (ROOT / name).read_text(encoding="utf-8").splitlines()
  return _DOCS[name]


def _json(name):
  if name not in _JSONS:
    _JSONS[name] = json.loads((ROOT / name).read_text(encoding="utf-8"))
  return _JSONS[name]


def _pattern(template):
  parts = template.split("{}")
  return re.compile(NUMBER.join(re.escape(p) for p in parts))


def check(bind):
  """The failures of one binding, one line each (empty: it holds)."""
  pattern = _pattern(bind.template)
  assert pattern.groups == len(bind.figures), f"{bind.template!r}: {pattern.groups} slots"
  lines = _doc(bind.doc)
  hits = [(i + 1, m) for i, line in enumerate(lines) if (m := pattern.search(line))]
  if len(hits) != 1:
    where = ", ".join(str(n) for n, _ in hits) or "no line"
    return [f"{bind.doc}: {bind.template!r} found on {where} (must be exactly one line)"]
  lineno, match = hits[0]
  try:
    data = _json(bind.json)
  except FileNotFoundError:
    return [f"{bind.doc}:{lineno}: {bind.json} is missing"]
  failures = []
  for quoted, fig in zip(match.groups(), bind.figures, strict=True):
    key = fig.key if isinstance(fig.key, str) else f"{fig.key.num} / {fig.key.den}"
    try:
      value, text = expected(data, fig)
    except (KeyError, TypeError, ZeroDivisionError) as e:
      failures.append(f"{bind.doc}:{lineno}: {bind.json} has no {key}: {e}")
      continue
    if quoted != text:
      failures.append(
        f"{bind.doc}:{lineno}: quotes {quoted}, {bind.json} {key} = {value!r} "
        f"gives {text} ({getattr(fig.fmt, '__name__', fig.fmt)}"
        + (f" of x{fig.scale:g}" if fig.scale != 1.0 else "")
        + ")"
      )
  return failures


def _id(bind):
  return f"{bind.doc}:{bind.template[:40]}"


@pytest.mark.parametrize("bind", BOUND, ids=_id)
def test_quoted_figure_equals_its_json(bind):
  failures = check(bind)
  assert not failures, "\n".join(failures)


@pytest.mark.parametrize("entry", UNBOUND, ids=lambda e: f"{e[0]}:{e[1][:40]}")
def test_unbound_figure_still_quoted(entry):
  doc, text, reason = entry
  assert reason
  assert any(text in line for line in _doc(doc)), (
    f"{doc}: {text!r} is no longer quoted; drop it from UNBOUND"
  )


def test_every_json_named_exists():
  for name in {b.json for b in BOUND}:
    assert (ROOT / name).is_file(), name


def test_a_differing_figure_fails_with_the_line_json_and_key(tmp_path):
  doc = tmp_path / "DOC.md"
  doc.write_text("intro\n| x | 0.667 s | 1,205 MB |\n", encoding="utf-8")
  js = tmp_path / "r.json"
  js.write_text(json.dumps({"rows": [{"m": "a", "s": 0.6671, "mb": 1205.4}]}), encoding="utf-8")
  _DOCS.clear()
  _JSONS.clear()
  try:
    good = Bind(
      str(doc), "| x | {} s | {} MB |", str(js), (s3("rows[m=a]/s"), comma("rows[m=a]/mb"))
    )
    assert check(good) == []
    bad = Bind(str(doc), "| x | {} s | {} MB |", str(js), (s3("rows[m=a]/s"), f1("rows[m=a]/mb")))
    (msg,) = check(bad)
    assert msg.startswith(f"{doc}:2: quotes 1,205, {js} rows[m=a]/mb = 1205.4 gives 1205.4")
    missing = Bind(
      str(doc), "| x | {} s | {} MB |", str(js), (s3("rows[m=b]/s"), comma("rows/0/mb"))
    )
    (msg,) = check(missing)
    assert f"{doc}:2: {js} has no rows[m=b]/s" in msg
    absent = Bind(str(doc), "| y | {} s |", str(js), (s3("rows/0/s"),))
    assert "no line" in check(absent)[0]
  finally:
    _DOCS.clear()
    _JSONS.clear()
