"""Where the time of one certification goes, piece by piece (default: ResNet-110 on this device).

Times, for one input and the engine's batch ``b`` (``batch_size="auto"`` unless
``--batch-size``), best of ``--reps`` (wall and process CPU seconds, so a loaded
shared machine can be read too):

* ``engine``: ``rsjax.sample_counts`` for ``--num`` samples (noise + forward + count);
* ``noise``: the engine's noise alone (``sample_noise`` of ``b`` samples, per step);
* ``forward``: ``apply_fn`` alone on a ``[b, ...]`` batch (per step);
* ``count + rest``: engine minus noise and forward (noisy input, argmax, counts, loop);
* ``launch``: one ``sample_counts`` call of a single sample, minus a forward of one;
* ``host statistics``: Clopper-Pearson bound and radius of one input (SciPy);
* per 3x3 convolution of each CIFAR ResNet stage (16, 32, 64 channels), XLA in
  NHWC and NCHW layouts against PyTorch (NCHW) at the same batch, and the
  whole forward in PyTorch (when installed), to show which kernels lose.

``--noise`` instead times the Gaussian noise streams alone (1,000 samples of
784 normals, one key per sample as in the engine): ``jax.random.normal``, the
default stream (``jax.extend.random.threefry_2x32``, which JAX lowers on CPU to a
rolled loop) and ``gaussian_fast`` (13 rounds, written out, fused).

Commands::

  python -m benchmarks.profile --model resnet110 --num 416 --reps 3
  python -m benchmarks.profile --noise --reps 5
"""

from __future__ import annotations

import argparse
import time

import numpy as np

try:
  import torch
except ImportError:  # benchmark-only extra
  torch = None

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import rsjax  # noqa: E402
from benchmarks.common import dump_json  # noqa: E402
from rsjax import models, stats  # noqa: E402
from rsjax import noise as noise_lib
from rsjax.engine import batching  # noqa: E402

SIGMA = 0.25


def best_time(fn, reps: int) -> dict:
  """Best wall and process-CPU seconds of ``fn()`` over ``reps`` calls (after one warm-up)."""
  fn()
  wall, cpu = [], []
  for _ in range(reps):
    w, c = time.perf_counter(), time.process_time()
    fn()
    wall.append(time.perf_counter() - w)
    cpu.append(time.process_time() - c)
  return {"wall_s": min(wall), "cpu_s": min(cpu)}


def _sync(x):
  return jax.block_until_ready(x)


def conv_stages(batch: int, reps: int) -> list[dict]:
  """One 3x3 convolution per CIFAR ResNet stage: XLA (NHWC, NCHW) and PyTorch (NCHW)."""
  rows = []
  rng = np.random.default_rng(0)
  for ch, hw in ((16, 32), (32, 16), (64, 8)):
    x = rng.standard_normal((batch, hw, hw, ch), dtype=np.float32)
    k = rng.standard_normal((3, 3, ch, ch), dtype=np.float32)
    nhwc = jax.jit(
      lambda x, k: jax.lax.conv_general_dilated(
        x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
      )
    )
    nchw = jax.jit(
      lambda x, k: jax.lax.conv_general_dilated(
        x, k, (1, 1), "SAME", dimension_numbers=("NCHW", "OIHW", "NCHW")
      )
    )
    xj, kj = jnp.asarray(x), jnp.asarray(k)
    xc, kc = jnp.asarray(x.transpose(0, 3, 1, 2)), jnp.asarray(k.transpose(3, 2, 0, 1))
    row = {
      "channels": ch,
      "size": hw,
      "batch": batch,
      "gflop": 2 * batch * hw * hw * ch * ch * 9 / 1e9,
      "xla_nhwc": best_time(lambda f=nhwc, x=xj, k=kj: _sync(f(x, k)), reps),
      "xla_nchw": best_time(lambda f=nchw, x=xc, k=kc: _sync(f(x, k)), reps),
    }
    if torch is not None:
      xt, kt = (
        torch.from_numpy(x.transpose(0, 3, 1, 2).copy()),
        torch.from_numpy(k.transpose(3, 2, 0, 1).copy()),
      )
      with torch.no_grad():
        row["torch"] = best_time(
          lambda x=xt, k=kt: torch.nn.functional.conv2d(x, k, padding=1), reps
        )
    rows.append(row)
  return rows


def profile(name: str, *, num: int, batch_size, reps: int, seed: int = 0) -> dict:
  """Piece-by-piece times of ``name``'s certification on the first device (see module doc)."""
  from benchmarks import measure

  spec = measure.SPECS[name]
  model = models.create_model(
    name, num_classes=spec.num_classes, input_shape=spec.input_shape, rngs=seed
  )
  apply_fn, variables = models.to_apply_fn(model)
  x = np.random.default_rng(seed).random((1,) + spec.input_shape, dtype=np.float32)
  b = (
    batching.auto_batch_size(apply_fn, variables, spec.input_shape, num=num)
    if batch_size == "auto"
    else int(batch_size)
  )
  steps = -(-num // b)
  out = {
    "model": name,
    "num": num,
    "batch_size": b,
    "steps": steps,
    "device": jax.local_devices()[0].device_kind,
  }

  def engine(n=num, bs=b):
    return rsjax.sample_counts(
      jax.random.key(1),
      apply_fn,
      variables,
      x,
      sigma=SIGMA,
      num_classes=spec.num_classes,
      num=n,
      batch_size=bs,
    )

  gauss = noise_lib.get_noise("gaussian")
  noise_fn = jax.jit(lambda key, j: rsjax.sample_noise(gauss, key, 0, j, spec.input_shape))
  j = jnp.arange(b, dtype=jnp.uint32)
  fwd = jax.jit(apply_fn)
  xb = jnp.asarray(np.repeat(x, b, axis=0))
  x1 = jnp.asarray(x)
  counts = engine()

  t = {"engine": best_time(engine, reps)}
  per_step = {
    "noise": best_time(lambda: _sync(noise_fn(jax.random.key(2), j)), reps),
    "forward": best_time(lambda: _sync(fwd(variables, xb)), reps),
  }
  for k, v in per_step.items():
    t[k] = {kk: vv * steps for kk, vv in v.items()}
  t["count + rest"] = {
    k: max(t["engine"][k] - t["noise"][k] - t["forward"][k], 0.0) for k in ("wall_s", "cpu_s")
  }
  one = best_time(lambda: engine(1, 1), reps)
  f1 = best_time(lambda: _sync(fwd(variables, x1)), reps)
  t["launch"] = {k: max(one[k] - f1[k], 0.0) for k in one}
  top = int(np.argmax(counts[0]))
  t["host statistics"] = best_time(
    lambda: stats.gaussian_radius(stats.clopper_pearson_lower(counts[0, top], num, 0.001), SIGMA),
    reps,
  )
  out["times"] = t
  if torch is not None:
    from rsjax.bench import torch_models as tm

    tmod = tm.from_flax(model, spec.input_shape)
    xt = torch.from_numpy(np.array(tm.to_torch_layout(np.asarray(xb))))
    for threads in sorted({1, torch.get_num_threads()}):
      torch.set_num_threads(threads)
      with torch.no_grad():
        v = best_time(lambda: tmod(xt), reps)
      out[f"torch_forward_{threads}_threads"] = {k: vv * steps for k, vv in v.items()}
  if len(spec.input_shape) == 3 and spec.input_shape[:2] == (32, 32):
    out["conv_stages"] = conv_stages(b, reps)
  return out


def noise_streams(reps: int, samples: int = 1000, shape=(784,)) -> dict:
  """Million normals per second (wall and CPU) of each Gaussian stream, engine-shaped.

  Besides rsjax's streams, ``jax.random.normal`` behind JAX's other typed-key
  implementations (``rbg``, ``unsafe_rbg``: XLA's ``RngBitGenerator``). Each row
  also says whether the stream is batch-invariant (64 samples drawn at once equal
  the same 64 drawn 8 at a time), the property rsjax's counts rest on.
  """
  streams = {
    "jax.random.normal": (jax.random.normal, "threefry2x32"),
    "jax.random.normal, rbg key": (jax.random.normal, "rbg"),
    "jax.random.normal, unsafe_rbg key": (jax.random.normal, "unsafe_rbg"),
    "threefry20 (default)": (noise_lib.standard_normal, "threefry2x32"),
    "threefry13 (gaussian_fast)": (
      lambda k, s: noise_lib.standard_normal(k, s, stream="threefry13"),
      "threefry2x32",
    ),
  }
  out = {}
  for name, (fn, impl) in streams.items():
    f = jax.jit(
      lambda key, js, fn=fn: jax.vmap(lambda k: fn(k, shape))(
        jax.vmap(lambda j: jax.random.fold_in(key, j))(js)
      )
    )
    key = jax.random.key(0, impl=impl)
    t = best_time(lambda f=f, key=key: _sync(f(key, jnp.arange(samples, dtype=jnp.uint32))), reps)
    n = samples * int(np.prod(shape)) / 1e6
    whole = np.asarray(f(key, jnp.arange(64, dtype=jnp.uint32)))
    parts = np.concatenate(
      [np.asarray(f(key, jnp.arange(s, s + 8, dtype=jnp.uint32))) for s in range(0, 64, 8)]
    )
    out[name] = {
      "M_normals_per_wall_s": n / t["wall_s"],
      "M_normals_per_cpu_s": n / t["cpu_s"],
      "batch_invariant": bool(np.array_equal(whole, parts)),
    }
  return out


def report(out: dict) -> str:
  t = out["times"]
  total = t["engine"]["wall_s"]
  lines = [
    f"# {out['model']}: N = {out['num']}, batch {out['batch_size']} ({out['steps']} steps), "
    f"{out['device']}",
    "| piece | wall s | share of engine | CPU s |",
    "|---|---|---|---|",
  ]
  for k, v in t.items():
    lines.append(f"| {k} | {v['wall_s']:.3f} | {v['wall_s'] / total:.0%} | {v['cpu_s']:.3f} |")
  for k in [k for k in out if k.startswith("torch_forward")]:
    lines.append(
      f"| PyTorch forward ({k.split('_')[2]} thr.) | {out[k]['wall_s']:.3f} | "
      f"{out[k]['wall_s'] / total:.0%} | {out[k]['cpu_s']:.3f} |"
    )
  if "conv_stages" in out:
    lines += [
      "",
      "| 3x3 conv, batch | GFLOP | XLA NHWC ms | XLA NCHW ms | PyTorch ms |",
      "|---|---|---|---|---|",
    ]
    for r in out["conv_stages"]:
      tor = r.get("torch", {}).get("wall_s")
      lines.append(
        f"| {r['channels']} ch, {r['size']}x{r['size']}, {r['batch']} | "
        f"{r['gflop']:.2f} | {r['xla_nhwc']['wall_s'] * 1e3:.1f} | "
        f"{r['xla_nchw']['wall_s'] * 1e3:.1f} | "
        f"{'-' if tor is None else f'{tor * 1e3:.1f}'} |"
      )
  return "\n".join(lines)


def main(argv=None) -> dict:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--model", default="resnet110")
  p.add_argument("--num", type=int, default=416, help="samples of the engine run")
  p.add_argument("--batch-size", default="auto")
  p.add_argument("--reps", type=int, default=3)
  p.add_argument("--noise", action="store_true", help="time the Gaussian noise streams only")
  p.add_argument("--json", default=None)
  args = p.parse_args(argv)
  if args.noise:
    out = noise_streams(args.reps)
    print(
      "| stream | M normals / wall s | M normals / CPU s | batch-invariant |\n|---|---|---|---|"
    )
    for k, v in out.items():
      print(
        f"| {k} | {v['M_normals_per_wall_s']:.0f} | {v['M_normals_per_cpu_s']:.0f} | "
        f"{'yes' if v['batch_invariant'] else 'NO'} |"
      )
  else:
    out = profile(
      args.model,
      num=args.num,
      batch_size=args.batch_size if args.batch_size == "auto" else int(args.batch_size),
      reps=args.reps,
    )
    print(report(out))
  dump_json(args.json, out)
  return out


if __name__ == "__main__":
  main()
