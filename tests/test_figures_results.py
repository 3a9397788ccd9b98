"""Figures that cannot drift, continued: what ``tests/test_figures.py`` left unbound in
``benchmarks/RESULTS.md`` (issue 55, item 3): issue 52's levers 2 to 6 and issue 43's profile
paragraph here, issue 40's figures in ``tests/test_figures_budgeted.py``; and the sections whose
figures no committed JSON holds, each with the command that printed them.

Two forms beside ``test_figures.Bind`` (whose key paths and templates are used here):

* ``Line(template, json, figures)``: one line of RESULTS.md, as ``Bind``; a figure's key may be a
  function of the JSON (a count, a sum, a difference) and its format a function (``8.6e-4``).
* ``Block(header, json, rows)``: a fenced table: the line ``header`` (exactly one), then each
  row template on the lines right after it, in order (rows that read alike are told apart by
  their place).

No JAX: only the markdown and the JSON are read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from tests import test_figures as tf

R = tf.R
B = tf.B
LEVERS = B + "levers_cpu.json"
TRACE = B + "gpu_trace_resnet110_bf16.json"


@dataclasses.dataclass(frozen=True)
class G:
  """One figure: a key path (or a function of the JSON) and the prose's rounding (a format
  spec, or a function of the value)."""

  key: str | Callable[[Any], float]
  fmt: str | Callable[[float], str]
  scale: float = 1.0


@dataclasses.dataclass(frozen=True)
class Line:
  template: str
  json: str
  figures: tuple[G, ...]


@dataclasses.dataclass(frozen=True)
class Block:
  header: str
  json: str
  rows: tuple[tuple[str, tuple[G, ...]], ...]


def _g(spec: str | Callable[[float], str], scale: float = 1.0) -> Callable[..., G]:
  return lambda key: G(key, spec, scale)


d0, f1, f2, f3, f4 = _g(".0f"), _g(".1f"), _g(".2f"), _g(".3f"), _g(".4f")
s3, comma, ints = _g("#.3g"), _g(",.0f"), _g("d")
pct0, pct1, pct2 = _g(".0f", 100.0), _g(".1f", 100.0), _g(".2f", 100.0)
thousands = _g(".1f", 1e-3)  # 23.2 (k)
e1 = _g(lambda v: f"{v:.1e}".replace("e-0", "e-"))  # 8.6e-4


def _value(data: Any, fig: G) -> tuple[Any, str]:
  value = fig.key(data) if callable(fig.key) else tf.lookup(data, fig.key)
  scaled = value * fig.scale if fig.scale != 1.0 else value
  return value, fig.fmt(scaled) if callable(fig.fmt) else format(scaled, fig.fmt)


def _compare(where: str, match: Any, data: Any, figures: tuple[G, ...]) -> list[str]:
  out = []
  for quoted, fig in zip(match.groups(), figures, strict=True):
    name = fig.key if isinstance(fig.key, str) else getattr(fig.key, "__name__", "a function")
    try:
      value, text = _value(data, fig)
    except (KeyError, TypeError, ZeroDivisionError) as e:
      out.append(f"{where}: the JSON has no {name}: {e}")
      continue
    if quoted != text:
      out.append(f"{where}: quotes {quoted}, the JSON's {name} = {value!r} gives {text}")
  return out


def check_line(bind: Line) -> list[str]:
  pattern = tf._pattern(bind.template)
  assert pattern.groups == len(bind.figures), bind.template
  hits = [(i + 1, m) for i, line in enumerate(tf._doc(R)) if (m := pattern.search(line))]
  if len(hits) != 1:
    return [f"{R}: {bind.template!r} on {len(hits)} lines (must be exactly one)"]
  lineno, match = hits[0]
  return _compare(f"{R}:{lineno} ({bind.json})", match, tf._json(bind.json), bind.figures)


def check_block(block: Block) -> list[str]:
  lines = tf._doc(R)
  starts = [i for i, line in enumerate(lines) if block.header in line]
  if len(starts) != 1:
    return [f"{R}: header {block.header!r} on {len(starts)} lines (must be exactly one)"]
  out = []
  for k, (template, figures) in enumerate(block.rows):
    i = starts[0] + 1 + k
    pattern = tf._pattern(template)
    assert pattern.groups == len(figures), template
    match = pattern.fullmatch(lines[i]) if i < len(lines) else None
    if match is None:
      out.append(f"{R}:{i + 1}: expected {template!r}")
      continue
    out += _compare(f"{R}:{i + 1} ({block.json})", match, tf._json(block.json), figures)
  return out


# ---------------------------------------------------------------------------
# Issue 52, levers 2 to 6 (levers_cpu.json).


def _program(label: str, pack: int, fold: bool) -> Line:
  p = f"program[pack={pack},fold_bn={fold}]"
  s, c = f"{p}/stablehlo", f"{p}/compiled_cpu"
  return Line(
    f"| {label} | {{}} | {{}} / {{}}, {{}} | {{}} / {{}} | {{}} | [{{}}, {{}}] | {{}} | {{}} |",
    LEVERS,
    (
      ints(f"{p}/steps"),
      ints(f"{s}/while"),
      ints(f"{c}/while"),
      ints(f"{c}/while_with_known_trip_count"),
      ints(f"{s}/conditional"),
      ints(f"{c}/conditional"),
      ints(f"{s}/convolution"),
      ints(lambda d, c=c: min(tf.lookup(d, f"{c}/known_trip_counts"))),
      ints(lambda d, c=c: max(tf.lookup(d, f"{c}/known_trip_counts"))),
      f2(f"{s}/activation_ops_per_gap"),
      f1(f"{c}/compile_s"),
    ),
  )


def _gap(label: str, pack: int, fold: bool, ops: str, tail: str = "") -> Line:
  key = f"program[pack={pack},fold_bn={fold}]/stablehlo/ops_between_convs/{ops}"
  return Line(
    f"| {label} | {ops.replace('broadcast_in_dim', 'broadcast')}{tail} | {{}} |",
    LEVERS,
    (ints(key),),
  )


NOFOLD = "broadcast_in_dim > subtract > broadcast_in_dim > multiply > broadcast_in_dim > add"
FOLD, UNPACK = "broadcast_in_dim > add", " > reshape > transpose > reshape"
VARIANTS = (("no fold", 1, False), ("`--fold-bn`", 1, True), ("`--pack 2 --fold-bn`", 2, True))
R20, R50 = "timing[model=resnet20]", "timing[model=resnet50]"


def _timing(label: str, sel: str) -> Line:
  return Line(
    f"| {label} | {{}} ({{}}) | {{}} | {{}} / {{}} / {{}} | {{}} / {{}} / {{}} | {{}} |",
    LEVERS,
    (
      ints(f"{sel}/num"),
      ints(f"{sel}/n0"),
      ints(f"{sel}/batch"),
      *[
        fig(f"{sel}/{phase}/{k}")
        for phase in ("cold", "warm")
        for fig, k in ((f1, "compile_s"), (f1, "first_call_s"), (f2, "certify_s"))
      ],
      f1(f"{sel}/compile_saved_s"),
    ),
  )


def _stage(name: str) -> Line:
  sel = f"lease/stages[stage={name}]"
  status = "skipped: not a GPU" if name == "lenet_nocmdbuf" else "ok"
  return Line(
    f"| {name} | {status} | {{}} | {{}} |", LEVERS, (ints(f"{sel}/seconds"), ints(f"{sel}/limit"))
  )


STAGES = (
  "env conv conv_unfused lenet_scaling lenet_trace lenet_nocmdbuf r110_base r110_fold "
  "r110_fold_unfused r110_pack2 r110_pack2_fold r110_pack4 r50 twin_lenet"
).split()
TWIN = "lease/twins/twin_lenet"

LINES: list[Line] = [
  Line("jobs running, jax 0.10.2 on its CPU backend; {} s in all;", LEVERS, (d0("seconds"),)),
  Line(
    "one image, N = {} at batch {} ({}",
    LEVERS,
    (_g(",d")("program/0/num"), _g(",d")("program/0/batch"), ints("program/0/steps")),
  ),
  *[
    _program(f"ResNet-110 bf16{' ' + lab if lab != 'no fold' else ''}", p, f)
    for lab, p, f in VARIANTS
  ],
  *[_gap("no fold", 1, False, NOFOLD + t) for t in (" > relu", " > add > relu", "")],
  *[
    _gap(lab, p, True, FOLD + t)
    for lab, p, _ in VARIANTS[1:]
    for t in (" > relu", " > add > relu", "")
  ],
  _gap("`--pack 2 --fold-bn`", 2, True, FOLD + " > add > relu" + UNPACK, " (the unpack)"),
  Line(
    "unfolded program has batch norm's `subtract` and `multiply` on every output (and {} `rsqrt`s,",
    LEVERS,
    (ints("program[fold_bn=False]/stablehlo/rsqrt"),),
  ),
  Line(
    "against {} folded). Lowering took {} / {} / {} s.",
    LEVERS,
    (
      ints("program[pack=1,fold_bn=True]/stablehlo/rsqrt"),
      *[f1(f"program[pack={p},fold_bn={f}]/lower_s") for _, p, f in VARIANTS],
    ),
  ),
  _timing("ResNet-20 bf16", R20),
  _timing("ResNet-50 (224 px) bf16", R50),
  Line(
    "The warm cache leaves the trace and lowering ({} s and {} s): it saves {} of {} s (ResNet-20)",
    LEVERS,
    (
      f1(f"{R20}/warm/compile_s"),
      f1(f"{R50}/warm/compile_s"),
      f1(f"{R20}/compile_saved_s"),
      f1(f"{R20}/cold/compile_s"),
    ),
  ),
  Line(
    "and {} of {} s (ResNet-50). Whole processes: {} s -> {} s (ResNet-20) and {} s -> {} s",
    LEVERS,
    (
      f1(f"{R50}/compile_saved_s"),
      f1(f"{R50}/cold/compile_s"),
      *[f1(f"{sel}/{ph}/process_wall_s") for sel in (R20, R50) for ph in ("cold", "warm")],
    ),
  ),
  Line(
    "(ResNet-50; its certifications themselves took {} s and {} s on the loaded machine, so the",
    LEVERS,
    (f2(f"{R50}/cold/certify_s"), f2(f"{R50}/warm/certify_s")),
  ),
  Line(
    "{} s gained on its first image is mostly noise", LEVERS, (f1(f"{R50}/first_call_saved_s"),)
  ),
  Line(
    "TWIN_MODELS=lenet`): rc {}, **{} s wall**, {} s in the stages.",
    LEVERS,
    (ints("lease/rc"), d0("lease/wall_s"), ints("lease/stage_seconds_sum")),
  ),
  *[_stage(name) for name in STAGES],
  Line(
    "(no mode failed), compiled in {} s; at LeNet with N = {} on this CPU it took {} s per image",
    LEVERS,
    (
      f1(f"{TWIN}/compile_s"),
      ints(lambda d: int(tf.lookup(d, "lease/sizes/NUM"))),
      f4(f"{TWIN}/twin_compiled_s"),
    ),
  ),
  Line(
    "against the eager twin's {} s and rsjax's {} s (ratio {}): per-call costs of a {}-sample",
    LEVERS,
    (
      f4(f"{TWIN}/twin_eager_s"),
      f3(f"{TWIN}/rsjax_s"),
      f3(f"{TWIN}/ratio_to_twin_compiled"),
      ints(lambda d: int(d["lease"]["sizes"]["NUM"]) + int(d["lease"]["sizes"]["N0"])),
    ),
  ),
]


# ---------------------------------------------------------------------------
# Issue 43, the profile paragraph (gpu_trace_resnet110_bf16.json).

AMPERE = (
  "top_kernels/sm80_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize256x32x"
)
CONV_MS = "by_class/convolution/ms"


def _conv_ms_after_ampere(d: Any) -> float:
  """Convolution milliseconds but the Ampere kernel's: the 32- and 64-channel stages."""
  ampere = [v for k, v in d["top_kernels"].items() if k.startswith(AMPERE.split("/")[1])]
  return tf.lookup(d, CONV_MS) - ampere[0]["ms"]


def _ampere(field: str) -> Callable[[Any], float]:
  def get(d: Any) -> float:
    (kernel,) = [v for k, v in d["top_kernels"].items() if k.startswith(AMPERE.split("/")[1])]
    return kernel[field]

  get.__name__ = f"the Ampere kernel's {field}"
  return get


LINES += [
  Line("perfetto trace; `gpu_trace_resnet110_bf16.json`): {} ms", TRACE, (d0("wall_ms"),)),
  Line(
    "traced ({} ms untraced), {} kernels, **device busy {} ms**, idle {} ms inside the call's",
    TRACE,
    (d0("untraced_wall_ms"), comma("kernels"), f1("busy_ms"), d0("gap_ms")),
  ),
  Line(
    "convolutions **{} ms** ({}% of busy), elementwise fusions {} ms (the ReLU/residual",
    TRACE,
    (d0(CONV_MS), pct0(lambda d: tf.lookup(d, CONV_MS) / d["busy_ms"]), d0("by_class/fusion/ms")),
  ),
  Line(
    "convolution), reductions {} ms, copies {} ms. Of the convolutions,",
    TRACE,
    (f1("by_class/reduction/ms"), f1("by_class/copy/ms")),
  ),
  Line(
    "**{} ms are {} launches of cuDNN's Ampere kernel",
    TRACE,
    (d0(_ampere("ms")), ints(_ampere("kernels"))),
  ),
  Line("n0 step and 7 steps of {} samples;", TRACE, (_g(",d")("batch_size"),)),
  Line(
    "{} ms for the 72 convolutions of the 32- and 64-channel stages",
    TRACE,
    (d0(_conv_ms_after_ampere),),
  ),
]


# Issue 55: LeNet written NCHW (lenet_nchw_cpu.json).
NCHW = B + "lenet_nchw_cpu.json"
PORT, OURS = "arms/0", "arms/1"
LINES += [
  Line(
    "| NCHW port, as written | {} | {} |",
    NCHW,
    (s3(f"{PORT}/results/0/seconds_per_image_measured"), f1(f"{PORT}/results/0/compile_s")),
  ),
  Line(
    "| the same, convolutions channels-last | {} | {} |",
    NCHW,
    (s3(f"{PORT}/layout/channels_last_s"), f1(f"{PORT}/layout/channels_last_compile_s")),
  ),
  Line(
    "| rsjax's LeNet (NHWC) | {} | {} |",
    NCHW,
    (s3(f"{OURS}/results/0/seconds_per_image_measured"), f1(f"{OURS}/results/0/compile_s")),
  ),
  Line(
    "{}x as fast as the port",
    NCHW,
    (
      f1(
        lambda d: (
          d["arms"][0]["layout"]["as_written_s"]
          / d["arms"][1]["results"][0]["seconds_per_image_measured"]
        )
      ),
    ),
  ),
]

# The denoised-smoothing section (its config: benchmarks/configs/ddpm.py).
DDPM = B + "denoised_cifar10_cpu.json"
LINES += [
  Line(
    "google/ddpm-cifar10-32's UNet ({} parameters, one step at t* = {}) before ResNet-110,",
    DDPM,
    (comma("unet_params"), ints("timestep")),
  ),
  Line(
    "one repetition: a rough figure): {} samples/s, about {} s ({} h) per CIFAR image at",
    DDPM,
    (
      f1("samples_per_s"),
      _g(lambda v: f"{round(v, -2):,.0f}")("s_per_image_at_N100000"),
      _g(".1f", 1 / 3600)("s_per_image_at_N100000"),
    ),
  ),
]

# Issue 72, item 3: token dropping (its config: benchmarks/configs/token_dropping.py).
TOKENS = B + "token_dropping_cpu.json"
LINES += [
  Line("load average {} at the end, so not quiet)", TOKENS, (f1("machine/load_avg_1m"),)),
  Line(
    "each keeping 7 or 14 of the 49 patch tokens ({} on average;", TOKENS, (f2("tokens_kept_mean"),)
  ),
  Line(
    "(`patch_counts`, what `--method patch` runs) | {} | {} |",
    TOKENS,
    (f2("images_per_s/full"), f2("images_per_s_median/full")),
  ),
  Line(
    "masked out of attention | {} | {} |",
    TOKENS,
    (f2("images_per_s/masked"), f2("images_per_s_median/masked")),
  ),
  Line(
    "(`rsjax.ablation.token_counts`) | {} | {} |",
    TOKENS,
    (f2("images_per_s/dropped"), f2("images_per_s_median/dropped")),
  ),
  Line("certifies **{}x** as many images per second", TOKENS, (f2("speedup_dropped_over_full"),)),
  Line(
    "best rounds; {}x at the medians",
    TOKENS,
    (f1(lambda d: d["images_per_s_median"]["dropped"] / d["images_per_s_median"]["full"]),),
  ),
  Line("image ({} of 32 differ)", TOKENS, (ints("images_counts_differ_dropped_masked"),)),
  Line(
    "ablation; they are not the plain full image's ({} of 32 images",
    TOKENS,
    (ints("images_counts_differ_dropped_full"),),
  ),
  Line("(the top class holds {} of the votes on average)", TOKENS, (f2("top_share_mean"),)),
]

# Issue 72, item 5: ART 1.20.1 on the same weights (its config: benchmarks/configs/art_patch.py).
ART = B + "art_patch_cpu.json"


LINES += [
  Line("VM shared with other sessions, load average {}). LeNet", ART, (f1("machine/load_avg_1m"),)),
  Line("within {} of rsjax's); 200", ART, (e1("twin_logits/max_abs_diff"),)),
  Line(
    "the same for every image ({} of 200 differ; {} image has",
    ART,
    (ints("images_counts_differ"), ints("images_with_near_threshold_votes")),
  ),
  *[
    Line(
      f"| {side} | {{}} | {{}} | {{}} | {{}} | {{}} |",
      ART,
      tuple(ints(f"certified_{key}_at_size/{m}") for m in range(1, 6)),
    )
    for side, key in (("rsjax", "rsjax"), ("ART", "art"))
  ],
  Line("The {} that differ are ART's tie rule", ART, (ints(lambda d: len(d["certified_differ"])),)),
  Line("rsjax {} certified", ART, (f1("images_per_s/rsjax"),)),
  Line(
    "images/s, ART {}: rsjax is **{}x** ART here",
    ART,
    (f1("images_per_s/art"), f2("speedup_rsjax_over_art")),
  ),
]

# Issue 72, item 5: block ablation against ART (its config: benchmarks/configs/art_patch_block.py).
ART_BLOCK = B + "art_patch_block_cpu.json"
LINES += [
  Line("sessions; load average {}). LeNet trained by", ART_BLOCK, (f1("machine/load_avg_1m"),)),
  Line("(logits within {} of rsjax's); 10", ART_BLOCK, (e1("twin_logits/max_abs_diff"),)),
  Line(
    "the same for every image ({} of 10 differ; no vote", ART_BLOCK, (ints("images_counts_differ"),)
  ),
  *[
    Line(
      f"| {side}, block | {{}} | {{}} | {{}} | {{}} | {{}} |",
      ART_BLOCK,
      tuple(ints(f"certified_{key}_at_size/{m}") for m in range(1, 6)),
    )
    for side, key in (("rsjax", "rsjax"), ("ART", "art"))
  ],
  Line(
    "rsjax certified {} images/s, ART {} (best of 2",
    ART_BLOCK,
    (f1("images_per_s/rsjax"), f2("images_per_s/art")),
  ),
  Line("certifies **{}x** as many here", ART_BLOCK, (f2("speedup_rsjax_over_art"),)),
]

# Issue 72, item 5: the column workload cut at its layers (benchmarks/configs/patch_profile.py).
PROFILE = B + "patch_profile_cpu.json"
LINES += [
  Line(
    "7 alternated rounds, ms per 1000 forward passes (median), rsjax at batch {}:",
    PROFILE,
    (ints("batch"),),
  ),
  Line(
    "{} at the start, {} at the end: other",
    PROFILE,
    (f1("load_avg_1m/start"), f1("load_avg_1m/end")),
  ),
  *[
    Line(
      f"| {label} | {{}} | {{}} |",
      PROFILE,
      (f2(f"ms_per_1000/rsjax/{key}"), f3(f"variable_fraction/{key}")),
    )
    for label, key in (
      ("first convolution (2 -> 6 channels, 5x5)", "conv1"),
      ("ReLU and pooling after the first", "relu_pool1"),
      ("second convolution (6 -> 16, 5x5)", "conv2"),
      ("ReLU and pooling after the second", "relu_pool2"),
    )
  ],
  Line("| dense layers | {} | 1 |", PROFILE, (f2("ms_per_1000/rsjax/fc"),)),
  Line("| whole forward, one program | {} | |", PROFILE, (f2("ms_per_1000/rsjax/forward"),)),
  Line(
    "the first convolution is {}% of rsjax's forward",
    PROFILE,
    (
      d0(lambda d: 100 * d["ms_per_1000"]["rsjax"]["conv1"] / d["ms_per_1000"]["rsjax"]["forward"]),
    ),
  ),
  Line(
    "would take at least {} ms per 1000, **{}x** less than",
    PROFILE,
    (f2("bound_ms"), f2(lambda d: d["ms_per_1000"]["rsjax"]["forward"] / d["bound_ms"])),
  ),
  Line("batch 128 took {} ms per 1000 here", PROFILE, (d0("ms_per_1000/torch_b128/forward"),)),
]

# Issue 72, item 5: the column workload after main's few_channel_conv (benchmarks/configs/
# art_patch.py with --set json=...; ART's PyTorch on every core, then on one thread).
ART_FC = B + "art_patch_fewconv_cpu.json"
ART_FC1 = B + "art_patch_fewconv_1thread_cpu.json"
LINES += [
  Line(
    "load average {} and {}; 200 `mnist5k`",
    ART_FC,
    (f1("machine/load_avg_1m"), f1(lambda d: tf._json(ART_FC1)["machine"]["load_avg_1m"])),
  ),
  Line(
    "| 2 (every core, the config's default) | {} | {} | {} |",
    ART_FC,
    (f1("images_per_s/rsjax"), f1("images_per_s/art"), f2("speedup_rsjax_over_art")),
  ),
  Line(
    "| 1 (one thread) | {} | {} | {} |",
    ART_FC1,
    (f1("images_per_s/rsjax"), f1("images_per_s/art"), f2("speedup_rsjax_over_art")),
  ),
  Line(
    "the same for every image in both runs ({} of 200 differ); the certificates differ",
    ART_FC,
    (ints(lambda d: d["images_counts_differ"] + tf._json(ART_FC1)["images_counts_differ"]),),
  ),
  Line("on {} (image, side) pairs, both", ART_FC1, (ints(lambda d: len(d["certified_differ"])),)),
  Line("**{}x** as many images per second, up from", ART_FC1, (f2("speedup_rsjax_over_art"),)),
]


# Issue 72, item 5: the band-only first convolution against ART, on an AMD EPYC, quiet.
ART_Z = B + "art_patch_zen5_cpu.json"
ART_Z1 = B + "art_patch_zen5_1thread_cpu.json"
LINES += [
  Line(
    "| 2 (the default: both cores), band-only conv1 | {} | {} | {} |",
    ART_Z,
    (f1("images_per_s/rsjax"), f1("images_per_s/art"), f2("speedup_rsjax_over_art")),
  ),
  Line(
    "| 1 (one thread), band-only conv1 | {} | {} | {} |",
    ART_Z1,
    (f1("images_per_s/rsjax"), f1("images_per_s/art"), f2("speedup_rsjax_over_art")),
  ),
  Line(
    "The counts are the same for every image ({} of 200 differ in either run) and",
    ART_Z,
    (ints(lambda d: d["images_counts_differ"] + tf._json(ART_Z1)["images_counts_differ"]),),
  ),
]


# Issue 72, item 5: the same runs on another host CPU (AVX-512 FP16, AMX), quiet.
ART_S = B + "art_patch_spr_cpu.json"
ART_S1 = B + "art_patch_spr_1thread_cpu.json"
PROFILE_S = B + "patch_profile_spr_cpu.json"
LINES += [
  Line(
    "| 2 (the default: both cores), other CPU | {} | {} | {} |",
    ART_S,
    (f1("images_per_s/rsjax"), f1("images_per_s/art"), f2("speedup_rsjax_over_art")),
  ),
  Line(
    "| 1 (one thread), other CPU | {} | {} | {} |",
    ART_S1,
    (f1("images_per_s/rsjax"), f1("images_per_s/art"), f2("speedup_rsjax_over_art")),
  ),
  Line(
    "The counts are again the same for every image ({} of 200 differ in either run)",
    ART_S,
    (ints(lambda d: d["images_counts_differ"] + tf._json(ART_S1)["images_counts_differ"]),),
  ),
  Line("1.29x to **{}x**: PyTorch's oneDNN", ART_S, (f2("speedup_rsjax_over_art"),)),
  Line(
    "rsjax's forward takes {} ms per 1000 (its first convolution,",
    PROFILE_S,
    (f2("ms_per_1000/rsjax/forward"),),
  ),
  Line(
    "the elementwise `few_channel_conv`, {} of it), PyTorch's eager forward at batch 128 {} ms",
    PROFILE_S,
    (f2("ms_per_1000/rsjax/conv1"), f2("ms_per_1000/torch_b128/forward")),
  ),
  Line("(its first convolution {}). The", PROFILE_S, (f2("ms_per_1000/torch_b128/conv1"),)),
  Line("bound of the profile is {} ms per 1000,", PROFILE_S, (f2("bound_ms"),)),
]


# Issue 72, item 5: the same two runs on a quiet machine (nothing else running).
ART_Q = B + "art_patch_quiet_cpu.json"
ART_Q1 = B + "art_patch_quiet_1thread_cpu.json"
LINES += [
  Line(
    "| 2 (the default: both cores), quiet | {} | {} | {} |",
    ART_Q,
    (f1("images_per_s/rsjax"), f1("images_per_s/art"), f2("speedup_rsjax_over_art")),
  ),
  Line(
    "| 1 (one thread), quiet | {} | {} | {} |",
    ART_Q1,
    (f1("images_per_s/rsjax"), f1("images_per_s/art"), f2("speedup_rsjax_over_art")),
  ),
  Line(
    "The counts are the same for every image in both runs ({} of 200 differ); the certificates",
    ART_Q,
    (ints(lambda d: d["images_counts_differ"] + tf._json(ART_Q1)["images_counts_differ"]),),
  ),
  Line(
    "differ on the same {} (image, side) pairs",
    ART_Q1,
    (ints(lambda d: len(d["certified_differ"])),),
  ),
  Line(
    "(both cores) rsjax is **{}x** as fast in certified images per second",
    ART_Q,
    (f2("speedup_rsjax_over_art"),),
  ),
]

PROFILE_FC = B + "patch_profile_fewconv_cpu.json"
LINES += [
  Line(
    "forward now runs it, load as above): the forward takes {} ms per 1000 (from {}),",
    PROFILE_FC,
    (
      f2("ms_per_1000/rsjax/forward"),
      f2(lambda d: tf._json(PROFILE)["ms_per_1000"]["rsjax"]["forward"]),
    ),
  ),
  Line(
    "first convolution {} of it, and the bound of the band's columns {}, {}x less than the",
    PROFILE_FC,
    (
      f2("ms_per_1000/rsjax/conv1"),
      f2("bound_ms"),
      f2(lambda d: d["ms_per_1000"]["rsjax"]["forward"] / d["bound_ms"]),
    ),
  ),
]

UNBOUND_ART = [
  ("about 7,400 forward passes/s", "printed by a one-off timing, not kept"),
  ("15,500/s at ART's batch of 128", "printed by a one-off timing, not kept"),
]

# ---------------------------------------------------------------------------
# Figures of those sections that no JSON holds, and the older sections: the command that
# printed them (their output was not kept as JSON).

UNBOUND: list[tuple[str, str]] = [
  ("(4.15 s NCHW against 2.39 s NHWC for 6 images)", "issue 55's own figures, quoted"),
  ("`loop_maximum_fusion`s, 133 ms", "the sum of the trace's loop_maximum_fusion kernels, by hand"),
  (
    "1.19 ms per full step, 67 GFLOP, about 57 TFLOP/s",
    "worked out by hand from the trace's kernels",
  ),
  ("about 0.22 ms per full step, about 300 TFLOP/s", "worked out by hand from the trace's kernels"),
  ("the first takes 76% of the convolution time", "worked out by hand from the trace's kernels"),
  ("(5,492 at `s` = 0.6; 5,114 at the whole alpha", "arithmetic: log(1 / (s alpha)) / -log Phi(3)"),
  *UNBOUND_ART,
]

#: ``(heading, the command its figures came from, why no JSON binds them)``.
SECTIONS: list[tuple[str, str, str]] = [
  ("## Per-call overhead", "benchmarks/configs/per_call.py", "timings printed, not kept"),
  ("## Issue 44", "benchmarks/configs/per_image.py", "timings printed, not kept"),
  ("## Issue 24", "benchmarks/configs/throughput_cpu.py", "timings printed, not kept"),
  ("## Issue 16", "benchmarks/configs/throughput_cpu.py", "timings printed, not kept"),
  ("## 2026-11-21", "benchmarks/configs/throughput_cpu.py", "printed, not kept"),
  ("## Earlier runs", "benchmarks/configs/throughput_cpu.py", "quick.json not committed"),
  ("## Certification measured directly", "--set args.num=100000", "printed, not kept"),
  ("## Goals (2-core CPU", "benchmarks/configs/throughput_cpu.py", "printed, not kept"),
  ("## bfloat16 versus float32", "benchmarks/configs/precision.py", "printed, not kept"),
  ("## Scaling over forced CPU devices", "benchmarks/configs/scaling.py", "printed, not kept"),
  ("## GPU: ready to run", "benchmarks/configs/gpu_suite.py", "commands, no figures"),
]


# ---------------------------------------------------------------------------
# The checks.


@pytest.mark.parametrize("bind", LINES, ids=lambda b: b.template[:48])
def test_quoted_figure_equals_its_json(bind):
  failures = check_line(bind)
  assert not failures, "\n".join(failures)


@pytest.mark.parametrize("text, why", UNBOUND, ids=lambda e: str(e)[:40])
def test_unbound_figure_still_quoted(text, why):
  assert why and any(text in line for line in tf._doc(R)), f"{text!r} is gone; drop it"


def _section(heading: str) -> list[str]:
  lines = tf._doc(R)
  (start,) = [i for i, line in enumerate(lines) if line.startswith(heading)]
  end = next((j for j in range(start + 1, len(lines)) if lines[j].startswith("## ")), len(lines))
  return lines[start:end]


@pytest.mark.parametrize("heading, command, why", SECTIONS, ids=lambda e: str(e)[:32])
def test_an_unbound_section_names_its_command(heading, command, why):
  assert why and any(command in line for line in _section(heading)), (heading, command)


def test_a_block_row_that_differs_fails_with_its_line(monkeypatch):
  monkeypatch.setitem(tf._DOCS, R, ["intro", "  head", "  a   1.50", "  b   2.00"])
  monkeypatch.setitem(tf._JSONS, "x.json", {"a": 1.5, "b": 2.004, "c": 1.0})
  rows = (("  a   {}", (f2("a"),)), ("  b   {}", (f2("b"),)))
  assert check_block(Block("  head", "x.json", rows)) == []
  bad = (("  a   {}", (f2("c"),)), ("  b   {}", (f1("b"),)))
  msgs = check_block(Block("  head", "x.json", bad))
  assert msgs[0].startswith(f"{R}:3 (x.json): quotes 1.50, the JSON's c = 1.0 gives 1.00")
  assert msgs[1].startswith(f"{R}:4 (x.json): quotes 2.00") and len(msgs) == 2
  derived = Line("  b   {}", "x.json", (e1(lambda d: d["a"] * 1e-4),))
  assert "gives 1.5e-4" in check_line(derived)[0]
