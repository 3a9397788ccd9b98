"""Compiles of a cold ``rsjax.certify``: an explicit batch size compiles no batch probe.

``batch_size="auto"`` compiles the engine's step once more to read its memory
(``rsjax.engine.batching``); a given integer must skip that, so that a large
model (ResNet-50 at 224 px: a minute of XLA:CPU) compiles its counts programs
only. Compiles are counted with JAX's own monitoring events.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import monitoring

import rsjax
from rsjax.engine import batching

_EVENT = "/jax/core/compile/backend_compile_duration"


def _conv_model():
  """A fresh one-conv classifier (a new function: nothing of it is compiled yet)."""
  w = jnp.asarray(np.random.default_rng(0).normal(size=(3, 3, 1, 4)), jnp.float32)
  d = jnp.asarray(np.random.default_rng(1).normal(size=(4, 3)), jnp.float32)

  def apply_fn(params, x):
    y = jax.lax.conv_general_dilated(
      x, params[0], (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )
    return jnp.mean(jnp.tanh(y), axis=(1, 2)) @ params[1]

  return apply_fn, (w, d)


def _compiles(batch_size) -> int:
  apply_fn, params = _conv_model()
  x = np.random.default_rng(2).random((2, 9, 9, 1), dtype=np.float32)
  events = []

  def listen(name, *_, **__):
    if name == _EVENT:
      events.append(name)

  monitoring.register_event_duration_secs_listener(listen)
  try:
    rsjax.certify(0, apply_fn, params, x, sigma=0.5, num_classes=3, n0=20, n=100,
                  batch_size=batch_size)  # fmt: skip
  finally:
    monitoring.unregister_event_duration_listener(listen)
  return len(events)


def test_an_explicit_batch_compiles_no_probe(monkeypatch):
  auto = _compiles("auto")
  probed = []
  real = batching.probe_step

  def probe_step(*a, **k):
    probed.append(1)
    return real(*a, **k)

  monkeypatch.setattr(batching, "probe_step", probe_step)
  explicit = _compiles(50)
  assert probed == []
  assert explicit < auto  # the probe's compile is the difference
  assert explicit <= 4  # the two passes' counts programs and the keys' fold, no more


def test_the_cli_passes_an_explicit_batch_as_an_int():
  from rsjax.app.cli import flags

  assert flags.batch_size("64") == 64 and flags.batch_size("auto") == "auto"


def test_certify_takes_a_cache_dir_after_the_command(monkeypatch):
  from rsjax.app.cli import _main, build_parser

  args = build_parser("certify").parse_args(["certify", "m", "o.tsv", "--cache-dir", "/c"])
  assert args.compilation_cache == "/c"
  assert (
    build_parser("certify")
    .parse_args(["--cache-dir", "/d", "certify", "m", "o.tsv"])
    .compilation_cache
    == "/d"
  )
  assert _main._command(["--cache-dir", "/d", "certify"]) == "certify"
  updates = {}
  monkeypatch.setattr(jax.config, "update", lambda name, value: updates.__setitem__(name, value))
  _main._setup_jax(args)
  assert updates["jax_compilation_cache_dir"] == "/c"
  assert updates["jax_persistent_cache_min_entry_size_bytes"] == 0
  if "jax_persistent_cache_enable_xla_caches" in jax.config.values:  # where this JAX has the option
    assert (
      updates["jax_persistent_cache_enable_xla_caches"] == "xla_gpu_per_fusion_autotune_cache_dir"
    )


def test_the_compile_clock_sums_this_blocks_compiles_only():
  """``launch.compile_clock`` (the ``compiling`` share ``rsjax certify`` prints): a fresh
  program's compile is counted, a program compiled before the block is not."""
  from rsjax.util import compile_clock

  apply_fn, params = _conv_model()
  x = np.ones((2, 9, 9, 1), np.float32)
  f = jax.jit(apply_fn)
  with compile_clock() as cold:
    f(params, x).block_until_ready()
  with compile_clock() as warm:
    f(params, x).block_until_ready()
  assert cold[0] > 0.0
  assert warm[0] == 0.0
