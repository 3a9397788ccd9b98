"""``rsjax bench --method patch`` and ``--method ablation``: how fast a classifier of encoded
images certifies by derandomized smoothing (band or block positions per second) and by
randomized ablation (ablated samples per second), through ``rsjax.certify`` with the method's
certifier, as ``rsjax certify --method patch`` / ``ablation`` run it.

The model takes the encoded images ``[H, W, 2C]`` (``rsjax train --method patch`` or
``ablation``, or an architecture with ``--input-shape H,W,2C``); the images certified are
``[H, W, C]``: uniform random ones (seeded) or a dataset's first test images. One warm-up call
first (its seconds reported apart: compilation), then calls of ``images`` images each in rounds
(:mod:`rsjax.app.bench.rounds`; the median round quoted).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from rsjax.app.bench import machine, rounds
from rsjax.app.bench.target import Target, shape_text
from rsjax.app.launch.errors import RunError

__all__ = ["METHODS", "bench_ablation", "image_shape", "lines"]

#: The ablation workloads ``rsjax bench --method`` times.
METHODS = ("patch", "ablation")
#: Estimation ablations of a timed L0 call unless ``--measure-n`` or ``--full`` says otherwise.
L0_MEASURE_N = 1000
#: Images of one timed call when ``--images`` is not given.
DEFAULT_IMAGES = {"patch": 8, "ablation": 1}


def image_shape(target: Target) -> tuple[int, int, int]:
  """``(H, W, C)``: the images of a model that takes their encoding ``(H, W, 2C)``."""
  shape = tuple(target.input_shape)
  if len(shape) != 3 or shape[2] % 2:
    raise RunError(
      f"--method patch/ablation: the model takes {shape_text(shape)}, not encoded images "
      "H,W,2C ((x, 1 - x) at kept pixels): train it with rsjax train --method patch or "
      "ablation, or give --input-shape H,W,2C with --arch"
    )
  return shape[0], shape[1], shape[2] // 2


def _inputs(shape, count: int, dataset: str | None, data_dir, seed: int) -> tuple[np.ndarray, str]:
  """``count`` images ``[count, H, W, C]`` and what they are."""
  if dataset is None:
    x = np.random.default_rng(seed).random((count, *shape), dtype=np.float32)
    return x, "uniform random images in [0, 1]"
  from rsjax.app import launch

  ds = launch.open_dataset(dataset, "test", data_dir)
  if tuple(ds.input_shape) != tuple(shape):
    raise RunError(
      f"--dataset {dataset}: its images are {shape_text(ds.input_shape)}, the model takes "
      f"their encoding {shape_text((*shape[:2], 2 * shape[2]))}"
    )
  x, _ = ds.get_batch(range(min(count, len(ds))))
  return np.asarray(x, np.float32), f"the first {len(x)} {ds.name} test images"


def _certifier(method: str, options: dict[str, Any]):
  from rsjax.ablation import L0Ablation, Patch

  if method == "patch":
    ablation, size = options.get("ablation", "column"), int(options.get("ablation_size", 4))
    return Patch(ablation, size, drop_tokens=bool(options.get("drop_tokens", False)))
  if method == "ablation":
    return L0Ablation(int(options.get("keep", 45)))
  raise RunError(f"--method must be one of {', '.join(METHODS)}, got {method!r}")


def _stated(certifier) -> dict[str, Any]:
  """The options the certifier runs with (the JSON's ``options``)."""
  if hasattr(certifier, "keep"):
    return {"keep": certifier.keep}
  a, s, d = certifier.ablation, certifier.size, certifier.drop_tokens
  return {"ablation": a, "ablation_size": s, "drop_tokens": d}


def _work(method: str, certifier, shape, n0: int, n: int) -> tuple[int, str]:
  """Forward passes of one image and their name."""
  if method == "patch":
    from rsjax.ablation import position_masks

    return len(position_masks(shape, certifier.ablation, certifier.size)), "positions"
  return n0 + n, "samples"


def bench_ablation(
  target: Target,
  request,
  method: str,
  options: dict[str, Any] | None = None,
  *,
  log: Callable[[str], None] = print,
) -> dict[str, Any]:
  """Times ``rsjax.certify`` with the method's certifier on ``target``.

  Args:
    target: the model of encoded images (:func:`rsjax.app.bench.load_target`).
    request: a :class:`rsjax.app.bench.Request` (its first precision, n0, target and
      measured N, images, batch, dataset and seed are used).
    method: ``"patch"`` or ``"ablation"``.
    options: the method's options (``ablation``, ``ablation_size``, ``drop_tokens``: a ViT's
      ablated tokens dropped; ``keep``).
    log: where progress lines go.

  Returns:
    The JSON: the model, the method and its options, the inputs, the forward passes of one
    image (``passes_per_image``: positions, or n0 + N), the rounds (``samples_per_s``: passes
    per second, median of the rounds), ``images_per_s``, the compile call's seconds, and for
    ``ablation`` the seconds per image extrapolated to the target N.
  """
  import rsjax

  options = dict(options or {})
  shape = image_shape(target)
  certifier = _certifier(method, options)
  if getattr(certifier, "drop_tokens", False):
    from rsjax.ablation._certify import vit_patch

    try:
      vit_patch(target.apply_fn, target.params)
    except ValueError as e:
      raise RunError(f"--drop-tokens: {e}") from None
  precision = request.precisions[0]
  full = method == "patch" or request.full
  n = request.target_n if full else min(request.target_n, request.measure_n or L0_MEASURE_N)
  per_call = int(request.images or DEFAULT_IMAGES[method])
  xs, what = _inputs(shape, 2 * per_call, request.dataset, request.data_dir, request.seed)
  per_call = min(per_call, len(xs))
  passes, unit = _work(method, certifier, shape, request.n0, n)
  batch = request.batch if isinstance(request.batch, int) else 1000
  sampling = {"n0": request.n0, "n": n, "alpha": 0.001, "batch_size": batch}
  sampling["precision"] = precision
  key = jax.random.key(request.seed)

  def call(i: int):
    start = (i * per_call) % max(1, len(xs) - per_call + 1)
    ids = np.arange(start, start + per_call)
    cert = rsjax.certify(
      key, target.apply_fn, target.params, xs[ids], num_classes=target.num_classes,
      certifier=certifier, ids=ids, **sampling,
    )  # fmt: skip
    return np.asarray(cert.radius)

  log(f"{method}: certifying {what}, {per_call} a call, {passes} {unit} each ...")
  compile_s = rounds.seconds(lambda: call(0))
  timing = rounds.time_rounds(call, passes * per_call)
  doc = {
    "model": target.describe(),
    "method": method,
    "options": options | _stated(certifier),
    "image_shape": list(shape),
    "inputs": what,
    "precision": precision,
    "batch": batch,
    "images_per_call": per_call,
    "passes_per_image": passes,
    "unit": unit,
    "n0": request.n0 if method == "ablation" else None,
    "measured_n": n if method == "ablation" else None,
    "target_n": request.target_n if method == "ablation" else None,
    "compile_s": compile_s,
    **timing.as_dict(),
    "images_per_s": timing.median / passes,
    "machine": machine.environment(),
  }
  if method == "ablation":
    doc["seconds_per_image_at_target_n"] = (request.n0 + request.target_n) / timing.median
  return doc


def lines(doc: dict[str, Any]) -> list[str]:
  """The report of :func:`bench_ablation`'s JSON, as text."""
  m, opts = doc["model"], doc["options"]
  what = ", ".join(f"{k} {v}" for k, v in opts.items())
  out = [
    f"model: {m['name']} ({m['kind']}), encoded input {shape_text(m['input_shape'])}, "
    f"{m['num_classes']} classes",
    f"method: {doc['method']} ({what}); {doc['inputs']}, {doc['images_per_call']} a call, "
    f"{doc['precision']}, batch {doc['batch']}",
    f"compile (first call): {doc['compile_s']:.2f} s",
    f"{doc['unit']}/s: {doc['samples_per_s']:,.0f} (median of {len(doc['rounds'])} rounds; min "
    f"{doc['samples_per_s_min']:,.0f}, max {doc['samples_per_s_max']:,.0f})",
    f"certified images/s: {doc['images_per_s']:.3g} ({doc['passes_per_image']} {doc['unit']} "
    "an image)",
  ]
  if doc["method"] == "ablation":
    out.append(
      f"at N {doc['target_n']:,}: {doc['seconds_per_image_at_target_n']:.3g} s an image "
      f"(measured at N {doc['measured_n']:,}, extrapolated)"
    )
  if doc["busy"]:
    out.append(rounds.BUSY)
  return out
