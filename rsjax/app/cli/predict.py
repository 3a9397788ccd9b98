"""``rsjax predict``: predict with abstention (PREDICT of Cohen et al.)."""

from __future__ import annotations

import argparse

import numpy as np

from rsjax.app import launch
from rsjax.app.cli import flags

__all__ = ["HELP", "add_arguments", "run"]

HELP = "predict with abstention (PREDICT of Cohen et al.)"


def add_arguments(p: argparse.ArgumentParser) -> None:
  """The flags of ``rsjax predict``, in groups (``flags.add_sampling_flags``)."""
  p.usage = "%(prog)s [MODEL_DIR] OUTFILE [flags]"
  flags.add_sampling_flags(p)
  flags.output_flags(p)


def run(args: argparse.Namespace) -> int:
  """Runs ``rsjax predict``; returns the exit status."""
  import rsjax
  from rsjax.runs import runner

  run, loaded = flags.run_from_flags(args)
  ds, apply_fn, params, key = loaded.dataset, loaded.apply_fn, loaded.params, launch.key(run)
  indices = np.asarray(run.indices(), np.int64)

  def fn(x: np.ndarray, ids: np.ndarray) -> np.ndarray:
    return rsjax.predict(
      key,
      apply_fn,
      params,
      x,
      sigma=run.sigma,
      num_classes=ds.num_classes,
      n=args.N,
      alpha=args.alpha,
      batch_size=flags.batch_of(args),
      ids=ids,
      noise=args.noise,
      precision=args.precision,
    )

  wrote = runner.predict_dataset(
    fn,
    ds.get_batch,
    indices,
    args.outfile,
    inputs_per_call=(args.inputs_per_call or runner.default_inputs_per_call(args.N)),
    progress=not args.quiet,
    resume=not args.overwrite,
    run=run,
  )
  from rsjax import metrics
  from rsjax.records import io

  res = io.read_predict(args.outfile)
  print(
    f"predicted {wrote} new inputs; {len(res)} inputs in {args.outfile}: accuracy "
    f"{np.mean(res.correct):.4f}, abstained {metrics.abstention_rate(res.predict):.4f} "
    f"(N={args.N}, alpha={args.alpha})"
  )
  return 0
