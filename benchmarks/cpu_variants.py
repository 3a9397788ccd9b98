"""What else could make the CPU forward pass faster, each tried as an alternated A/B in one
process, the library unchanged (issue 66, item 1; :mod:`benchmarks.cpu_profile` runs them).

* :func:`alternate`: the clock every figure of the CPU profile comes from. Each arm is warmed up
  (compiled) once, its repeat count set so that one timing lasts ``min_s``; then ``rounds``
  rounds, every arm once per round in turn, so that load from other processes hits every arm
  alike. Figures are milliseconds per 1000 samples, min / median / max over the rounds.
* :func:`xla_flags`: ``XLA_FLAGS`` variants on a model's forward. A flag is read when XLA's
  CPU client starts, so each variant is a worker process (:func:`flag_worker`) that compiles the
  forward once and then times it on request; the parent asks each worker in turn, round by
  round, so the variants alternate as arms in one process do. ``taskset`` pins a variant to
  one core (XLA has no intra-op thread flag).
* :func:`layouts`: the same convolutions in ``jax.lax`` as NHWC/HWIO and as NCHW/OIHW, and
  PyTorch's ``conv2d`` (channels-last and contiguous NCHW).
* :func:`im2col`: LeNet's second convolution (6 -> 16 channels, 5x5, on 14x14) as
  ``lax.conv`` and as im2col + one dot; then the whole forward with it written either way.
* :func:`dtypes`: a model's forward in float32 and in bfloat16 (the engine's ``compute_dtype``
  path: inputs and floating parameters cast).
* :func:`levers`: a ResNet's forward as built, with its batch norms folded, with its 16-channel
  stage packed 2 or 4 samples a row (the library's own options).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np

try:
  import torch
except ImportError:  # benchmark-only extra
  torch = None

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from rsjax import models  # noqa: E402
from rsjax.engine import precision as precision_lib  # noqa: E402
from rsjax.engine import step as engine_step  # noqa: E402

__all__ = [
  "Arm",
  "alternate",
  "dtypes",
  "flag_worker",
  "im2col",
  "layouts",
  "levers",
  "program_marks",
  "stats",
  "xla_flags",
]

#: (name, XLA_FLAGS, command prefix): the variants :func:`xla_flags` tries by default.
FLAG_VARIANTS = (
  ("default", "", ()),
  ("thunk runtime off", "--xla_cpu_use_thunk_runtime=false", ()),
  ("Eigen single-threaded", "--xla_cpu_multi_thread_eigen=false", ()),
  ("oneDNN on", "--xla_cpu_use_onednn=true", ()),
  ("YNNPACK fusions off", "--xla_cpu_experimental_ynn_fusion_type=", ()),
  (
    "YNNPACK: convolutions one by one",
    "--xla_cpu_experimental_ynn_fusion_type=individual_convolution",
    (),
  ),
  ("fast math", "--xla_cpu_enable_fast_math=true", ()),
  ("one core (taskset -c 0)", "", ("taskset", "-c", "0")),
)


@dataclasses.dataclass(frozen=True)
class Arm:
  """One thing to time: ``fn()`` (blocks until done) over ``samples`` samples; ``setup()`` runs
  before each timing, outside the clock (e.g. PyTorch's thread count)."""

  fn: Callable[[], object]
  samples: int
  setup: Callable[[], object] | None = None


def stats(values: list[float]) -> dict:
  """``{"min", "median", "max", "rounds"}`` of per-round figures."""
  v = [float(x) for x in values]
  return {"min": min(v), "median": float(np.median(v)), "max": max(v), "rounds": v}


def alternate(arms: dict[str, Arm], rounds: int, min_s: float = 0.2) -> dict[str, dict]:
  """Milliseconds per 1000 samples of each arm, :func:`stats` over ``rounds`` alternated rounds
  (see the module doc)."""
  repeat = {}
  for name, arm in arms.items():
    if arm.setup is not None:
      arm.setup()
    arm.fn()  # compile, allocate
    t = time.perf_counter()
    arm.fn()
    repeat[name] = max(1, min(1000, math.ceil(min_s / max(time.perf_counter() - t, 1e-6))))
  per: dict[str, list[float]] = {name: [] for name in arms}
  for _ in range(rounds):
    for name, arm in arms.items():
      if arm.setup is not None:
        arm.setup()
      t = time.perf_counter()
      for _ in range(repeat[name]):
        arm.fn()
      per[name].append((time.perf_counter() - t) / repeat[name] / arm.samples * 1e6)
  return {name: {**stats(v), "repeat": repeat[name]} for name, v in per.items()}


def _sync(x):
  return jax.block_until_ready(x)


def aot(fn, *args, precision: str = "float32"):
  """``fn`` jitted and compiled for ``args`` at ``precision``'s matmul precision, as the engine
  traces its programs (``rsjax.engine.precision.context``): the compiled program runs as
  compiled wherever it is called, and its text is the program that runs."""
  with precision_lib.context(precision):
    return jax.jit(fn).lower(*args).compile()


def model_forward(name: str, batch: int, seed: int = 0, compute_dtype=None, model=None):
  """``(forward(), compiled forward, params, xb)`` of ``name``'s engine forward
  (``rsjax.engine.step.drawn_logits``, float32 matmul precision as the engine traces it) on a
  fixed batch of ``batch`` inputs in [0, 1]; ``model`` instead of the random-weight one."""
  from benchmarks.measure import SPECS

  spec = SPECS[name]
  if model is None:
    model = models.create_model(
      name, num_classes=spec.num_classes, input_shape=spec.input_shape, rngs=seed
    )
  apply_fn, variables = models.to_apply_fn(model)
  xb = jnp.asarray(np.random.default_rng(seed).random((batch,) + spec.input_shape, np.float32))
  ok = jnp.ones((1, batch), bool)
  params = engine_step.cast_floating(variables, compute_dtype)
  fwd = aot(
    lambda v, x: engine_step.drawn_logits(apply_fn, v, spec.num_classes, x, ok, compute_dtype)[0],
    params,
    xb,
    precision="float32" if compute_dtype is None else "bfloat16",
  )
  return (lambda: _sync(fwd(params, xb))), fwd, params, xb


def bare_convolutions(text: str) -> int:
  """Convolutions a compiled program leaves outside any fusion (XLA:CPU runs them with its
  runtime's Eigen kernel; one inside a YNNPACK fusion runs in YNNPACK)."""
  comp, n = "", 0
  for line in text.splitlines():
    if line and not line[0].isspace() and line.rstrip().endswith("{"):
      comp = line.split()[1 if line.startswith("ENTRY") else 0].lstrip("%")
    elif " convolution(" in line and not comp.startswith(("fused", "wrapped")):
      n += 1
  return n


def program_marks(text: str) -> dict:
  """What a flag or a lever may change in a compiled forward: its library fusions (YNNPACK,
  oneDNN, XNNPACK) and its convolutions left to XLA's runtime."""
  marks = {key.strip("_ "): text.count(key) for key in ("__ynn_fusion", "__onednn", "__xnn")}
  return {**marks, "bare convolutions": bare_convolutions(text)}


def flag_worker() -> None:
  """A worker of :func:`xla_flags` (stdin/stdout, one JSON a line): ``{"models", "batch",
  "min_s"}`` compiles each model's forward and answers the first logits and what its program
  holds (:func:`program_marks`); then each
  ``{"time": name}`` is answered with the milliseconds per 1000 samples of one timing."""
  req = json.loads(sys.stdin.readline())
  fns, repeat, out, program = {}, {}, {}, {}
  for name in req["models"]:
    run, fwd, params, xb = model_forward(name, req["batch"])
    fns[name] = run
    t = time.perf_counter()
    run()
    repeat[name] = max(1, math.ceil(req["min_s"] / (time.perf_counter() - t)))
    program[name] = program_marks(fwd.as_text())
    out[name] = np.asarray(fwd(params, xb))[:4].ravel().tolist()
  print(json.dumps({"logits": out, "program": program}), flush=True)
  for line in sys.stdin:
    name = json.loads(line)["time"]
    t = time.perf_counter()
    for _ in range(repeat[name]):
      fns[name]()
    ms = (time.perf_counter() - t) / repeat[name] / req["batch"] * 1e6
    print(json.dumps({"ms_per_1000": ms}), flush=True)


def _start_worker(flags: str, prefix: tuple, req: dict) -> subprocess.Popen:
  env = dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu")
  env["PYTHONPATH"] = os.pathsep.join(filter(None, (os.getcwd(), env.get("PYTHONPATH"))))
  code = "from benchmarks import cpu_variants; cpu_variants.flag_worker()"
  proc = subprocess.Popen(
    [*prefix, sys.executable, "-c", code],
    stdin=subprocess.PIPE,
    stdout=subprocess.PIPE,
    stderr=subprocess.DEVNULL,
    text=True,
    env=env,
  )
  proc.stdin.write(json.dumps(req) + "\n")
  proc.stdin.flush()
  return proc


def xla_flags(
  model_names=("resnet20",), *, batch: int = 256, rounds: int = 3, min_s: float = 0.5,
  variants=FLAG_VARIANTS,
) -> dict:  # fmt: skip
  """Each flag variant's forward of each model (see the module doc); ``max_abs_diff``: its logits
  against the default's on the same batch (a variant that changes results says so)."""
  req = {"models": list(model_names), "batch": batch, "min_s": min_s}
  workers, out = {}, {}
  for name, flags, prefix in variants:  # one at a time: compiles do not overlap
    proc = _start_worker(flags, tuple(prefix), req)
    line = proc.stdout.readline()
    if not line:
      out[name] = {"flags": flags, "error": f"worker exited ({proc.wait()})"}
      continue
    workers[name] = proc
    reply = json.loads(line)
    out[name] = {"flags": flags, "prefix": " ".join(prefix), "logits": reply["logits"]}
    out[name]["program"] = reply["program"]
  per = {(v, m): [] for v in workers for m in model_names}
  for _ in range(rounds):
    for m in model_names:
      for v, proc in workers.items():
        proc.stdin.write(json.dumps({"time": m}) + "\n")
        proc.stdin.flush()
        per[v, m].append(json.loads(proc.stdout.readline())["ms_per_1000"])
  for proc in workers.values():
    proc.stdin.close()
    proc.wait()
  base = out.get("default", {}).get("logits")
  for v in workers:
    logits = out[v].pop("logits")
    for m in model_names:
      diff = None if base is None else float(np.max(np.abs(np.subtract(logits[m], base[m]))))
      out[v][m] = {**stats(per[v, m]), "max_abs_diff": diff}
  return {"batch": batch, "rounds": rounds, "variants": out}


#: (label, batch-free input shape HWC, kernel (kh, kw, cin, cout), padding): the convolutions
#: :func:`layouts` times: LeNet's second, and one 3x3 of each CIFAR ResNet stage.
CONVS = (
  ("LeNet conv2 6->16 5x5 on 14x14", (14, 14, 6), (5, 5, 6, 16), "VALID"),
  ("ResNet 16->16 3x3 on 32x32", (32, 32, 16), (3, 3, 16, 16), "SAME"),
  ("ResNet 32->32 3x3 on 16x16", (16, 16, 32), (3, 3, 32, 32), "SAME"),
  ("ResNet 64->64 3x3 on 8x8", (8, 8, 64), (3, 3, 64, 64), "SAME"),
)


def _lax_conv(layout: str, pad: str):
  dn = ("NHWC", "HWIO", "NHWC") if layout == "nhwc" else ("NCHW", "OIHW", "NCHW")
  return lambda x, k: jax.lax.conv_general_dilated(x, k, (1, 1), pad, dimension_numbers=dn)


def _torch_conv(x: np.ndarray, k: np.ndarray, pad: str, channels_last: bool):
  xt = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
  kt = torch.from_numpy(np.ascontiguousarray(k.transpose(3, 2, 0, 1)))
  if channels_last:
    xt, kt = (
      xt.contiguous(memory_format=torch.channels_last),
      kt.contiguous(memory_format=torch.channels_last),
    )
  p = 0 if pad == "VALID" else k.shape[0] // 2

  def run():
    with torch.inference_mode():
      return torch.nn.functional.conv2d(xt, kt, padding=p)

  return run


def layouts(*, batch: int = 256, rounds: int = 3, min_s: float = 0.2, seed: int = 0) -> dict:
  """Each of :data:`CONVS` in NHWC and NCHW (``jax.lax``) and in PyTorch (see the module doc)."""
  rng = np.random.default_rng(seed)
  out = {}
  for label, shape, kshape, pad in CONVS:
    x = rng.standard_normal((batch,) + shape, dtype=np.float32)
    k = rng.standard_normal(kshape, dtype=np.float32)
    xn, kn = jnp.asarray(x), jnp.asarray(k)
    xc, kc = jnp.asarray(x.transpose(0, 3, 1, 2)), jnp.asarray(k.transpose(3, 2, 0, 1))
    nhwc, nchw = aot(_lax_conv("nhwc", pad), xn, kn), aot(_lax_conv("nchw", pad), xc, kc)
    diff = float(jnp.max(jnp.abs(nhwc(xn, kn) - nchw(xc, kc).transpose(0, 2, 3, 1))))
    arms = {
      "xla_nhwc": Arm(lambda f=nhwc, a=xn, b=kn: _sync(f(a, b)), batch),
      "xla_nchw": Arm(lambda f=nchw, a=xc, b=kc: _sync(f(a, b)), batch),
    }
    if torch is not None:
      arms["torch_channels_last"] = Arm(_torch_conv(x, k, pad, True), batch)
      arms["torch_nchw"] = Arm(_torch_conv(x, k, pad, False), batch)
    flops = 2 * batch * math.prod(kshape) * _out_pixels(shape, kshape, pad)
    out[label] = {
      "gflop": flops / 1e9,
      "nhwc_nchw_max_abs_diff": diff,
      **alternate(arms, rounds, min_s),
    }
  return {"batch": batch, "rounds": rounds, "convs": out}


def _out_pixels(shape, kshape, pad) -> int:
  if pad == "SAME":
    return shape[0] * shape[1]
  return (shape[0] - kshape[0] + 1) * (shape[1] - kshape[1] + 1)


def im2col_conv(x: jax.Array, k: jax.Array) -> jax.Array:
  """A VALID stride-1 convolution (NHWC, HWIO) as im2col and one dot: the ``kh * kw`` shifted
  windows stacked on the channel axis ``[b, h, w, kh * kw * cin]`` times ``k`` reshaped."""
  kh, kw, cin, cout = k.shape
  h, w = x.shape[1] - kh + 1, x.shape[2] - kw + 1
  cols = jnp.concatenate(
    [x[:, i : i + h, j : j + w, :] for i in range(kh) for j in range(kw)], axis=-1
  )
  return jnp.dot(cols, k.reshape(kh * kw * cin, cout), precision="highest")


def _lenet_forward(conv2: str):
  """LeNet's forward (``rsjax.models.LeNet``) written out, its second convolution ``conv2``:
  ``"lax"`` (``nnx.Conv``'s ``lax.conv``) or ``"im2col"`` (:func:`im2col_conv`)."""
  from flax import nnx

  def forward(graphdef, state, x):
    m = nnx.merge(graphdef, state)
    x = m.first_conv(m.normalize(x))
    x = nnx.max_pool(nnx.relu(x), (2, 2), strides=(2, 2))
    if conv2 == "lax":
      x = m.conv2(x)
    else:
      x = im2col_conv(x, m.conv2.kernel[...]) + m.conv2.bias[...]
    x = nnx.max_pool(nnx.relu(x), (2, 2), strides=(2, 2)).reshape(x.shape[0], -1)
    return m.fc3(nnx.relu(m.fc2(nnx.relu(m.fc1(x)))))

  return forward


def im2col(*, batch: int = 1000, rounds: int = 3, min_s: float = 0.2, seed: int = 0) -> dict:
  """LeNet's second convolution as ``lax.conv`` and as im2col + dot, alone (on a ``[batch, 14,
  14, 6]`` input) and inside the whole forward (see the module doc)."""
  from flax import nnx

  model = models.create_model("lenet", num_classes=10, input_shape=(28, 28, 1), rngs=seed)
  model.eval()
  graphdef, state = nnx.split(model)
  rng = np.random.default_rng(seed)
  h = jnp.asarray(rng.standard_normal((batch, 14, 14, 6), dtype=np.float32))
  x = jnp.asarray(rng.random((batch, 28, 28, 1), dtype=np.float32))
  k, bias = model.conv2.kernel[...], model.conv2.bias[...]
  conv = aot(lambda h, k, b: _lax_conv("nhwc", "VALID")(h, k) + b, h, k, bias)
  cols = aot(lambda h, k, b: im2col_conv(h, k) + b, h, k, bias)
  fwd_lax = aot(lambda s, x: _lenet_forward("lax")(graphdef, s, x), state, x)
  fwd_cols = aot(lambda s, x: _lenet_forward("im2col")(graphdef, s, x), state, x)
  apply_fn, variables = models.to_apply_fn(model)
  model_fwd = aot(apply_fn, variables, x)

  def diff(a, b):
    return float(jnp.max(jnp.abs(a - b)))

  checks = {
    "conv_max_abs_diff": diff(conv(h, k, bias), cols(h, k, bias)),
    "forward_max_abs_diff": diff(fwd_lax(state, x), fwd_cols(state, x)),
    "written_out_vs_model_max_abs_diff": diff(fwd_lax(state, x), model_fwd(variables, x)),
  }
  arms = {
    "conv2_lax": Arm(lambda: _sync(conv(h, k, bias)), batch),
    "conv2_im2col": Arm(lambda: _sync(cols(h, k, bias)), batch),
    "forward_lax": Arm(lambda: _sync(fwd_lax(state, x)), batch),
    "forward_im2col": Arm(lambda: _sync(fwd_cols(state, x)), batch),
  }
  if torch is not None:
    arms["conv2_torch"] = Arm(_torch_conv(np.asarray(h), np.asarray(k), "VALID", True), batch)
  return {"batch": batch, "rounds": rounds, **checks, **alternate(arms, rounds, min_s)}


def dtypes(
  model_names=("lenet", "resnet20", "resnet110"), *, batch: int = 256, rounds: int = 3,
  min_s: float = 0.2,
) -> dict:  # fmt: skip
  """Each model's engine forward in float32 and in bfloat16 (see the module doc), and how many
  of the batch's argmax classes differ."""
  out = {}
  for name in model_names:
    f32, fwd32, p32, xb = model_forward(name, batch)
    bf16, fwd16, p16, _ = model_forward(name, batch, compute_dtype=jnp.bfloat16)
    flips = int(jnp.sum(jnp.argmax(fwd32(p32, xb), -1) != jnp.argmax(fwd16(p16, xb), -1)))
    times = alternate({"float32": Arm(f32, batch), "bfloat16": Arm(bf16, batch)}, rounds, min_s)
    out[name] = {"argmax_differs": flips, **times}
  return {"batch": batch, "rounds": rounds, "models": out}


#: (label, batch norm folded, samples packed per row): the library's own options for what the
#: ResNets' profile points to (``rsjax.models.fold_batch_norm``, ``pack_narrow_stage``).
LEVERS = (
  ("as built", False, 1),
  ("batch norm folded", True, 1),
  ("packed by 2", False, 2),
  ("packed by 4", False, 4),
  ("folded, packed by 2", True, 2),
)


def levers(
  model_names=("resnet20", "resnet110"), *, batch: int = 256, rounds: int = 3,
  min_s: float = 0.2, seed: int = 0,
) -> dict:  # fmt: skip
  """Each model's engine forward as built, with its batch norms folded into the convolutions
  and with its 16-channel stage packed 2 or 4 samples a row (the library unchanged: its own
  options), alternated; per arm what its program holds (:func:`program_marks`) and how far its
  logits are from the model's as built (``max_rel_diff``: over the largest logit; random
  ResNet-110 weights make logits of about 1e8)."""
  from benchmarks.measure import SPECS

  out = {}
  for name in model_names:
    spec = SPECS[name]
    base = models.create_model(
      name, num_classes=spec.num_classes, input_shape=spec.input_shape, rngs=seed
    )
    arms, info, ref = {}, {}, None
    for label, fold, g in LEVERS:
      model = models.pack_narrow_stage(models.fold_batch_norm(base)[0] if fold else base, g)
      run, fwd, params, xb = model_forward(name, batch, seed, model=model)
      logits = np.asarray(fwd(params, xb))
      ref = logits if ref is None else ref
      diff = float(np.max(np.abs(logits - ref)))
      info[label] = {"max_abs_diff": diff, "max_rel_diff": diff / float(np.max(np.abs(ref)))}
      info[label].update(program_marks(fwd.as_text()))
      arms[label] = Arm(run, batch)
    times = alternate(arms, rounds, min_s)
    out[name] = {k: {**times[k], **info[k]} for k in arms}
  return {"batch": batch, "rounds": rounds, "models": out}
