"""``rsjax recertify PARENT.tsv CHILD_MODEL OUT.tsv``: certify a changed model from its parent
run's certificate (incremental randomized smoothing, ``--method recertify``).

The parent run is verified first (a parent that does not verify is refused). The child run
certifies the parent's declared rows with the parent's dataset, sigma, noise and radius;
its own settings are the disagreement samples (``--N``), their level (``--alpha``, alpha_2;
default the parent's) and the child's precision and packing. With ``--gamma`` (default 0.99,
the paper's) a row whose parent ``p_A_lower >= gamma`` is certified from scratch instead, with
``--N0`` and ``--N`` samples of the child at ``alpha_1 + alpha_2``. Its record names the parent's
result file, claim digest, model fingerprint and the digest of its certificate record, so
``rsjax verify OUT.tsv`` re-derives each child row from both runs' counts and ``rsjax audit
OUT.tsv --model-dir CHILD_MODEL`` draws the disagreement counts again. With ``--replay`` the
child runs on the parent's own estimation samples and is compared with the parent's votes on
them, stored once per parent in ``PARENT.tsv.votes.npz`` (drawn again from the parent's model
when missing), so a disagreement sample costs one child pass instead of a pass of each; the
switch then reads the parent's selection counts (``rsjax.cohen._recertify_replay``).
"""

from __future__ import annotations

import argparse

from rsjax.app import launch
from rsjax.app.cli import flags
from rsjax.app.cli._args import CliError

__all__ = ["HELP", "add_arguments", "run"]

HELP = "certify a changed model from its parent run's certificate with few samples"


def add_arguments(p: argparse.ArgumentParser) -> None:
  """The flags of ``rsjax recertify``."""
  p.add_argument("parent", help="the parent's certify result file (a verified --method cohen run)")
  p.add_argument("model_dir", metavar="CHILD_MODEL", help="the child's model directory")
  p.add_argument("outfile", metavar="OUT", help="the child's result file")
  p.add_argument("--N", type=flags.positive_int, default=2000,
                 help="disagreement samples per input (parent and child on each)")  # fmt: skip
  p.add_argument("--alpha", type=flags.probability, default=None,
                 help="level of the disagreement bound, alpha_2 (default: the parent's alpha); "
                 "each row claims alpha_1 + alpha_2")  # fmt: skip
  p.add_argument("--precision", default="float32", choices=("float32", "tf32", "bfloat16"),
                 help="the precision the child runs in")  # fmt: skip
  p.add_argument("--pack", type=int, default=1, choices=(1, 2, 4),
                 help="the child's narrow stage packed this many samples a row")  # fmt: skip
  p.add_argument("--fallback", action="store_true",
                 help="certify the rows the bound cannot from scratch (the parent's N0, N, "
                 "alpha_1; each row then claims 2 alpha_1 + alpha_2)")  # fmt: skip
  p.add_argument("--gamma", type=_gamma, default=0.99,
                 help="the paper's switch: certify from scratch (the child's N0 and N, alpha_1 + "
                 "alpha_2) the rows whose parent p_A_lower >= GAMMA, where the disagreement "
                 "bound cannot help (default 0.99; 'off': never)")  # fmt: skip
  p.add_argument("--replay", action="store_true",
                 help="run the child on the parent's own samples against its stored votes "
                 "(PARENT.tsv.votes.npz, drawn once from the parent's model when missing): one "
                 "child pass a disagreement sample; the switch reads the parent's selection "
                 "share")  # fmt: skip
  p.add_argument("--N0", type=flags.positive_int, default=None,
                 help="selection samples of the rows certified from scratch by the switch "
                 "(default: the parent's N0)")  # fmt: skip
  p.add_argument("--seed", type=int, default=0, help="PRNG seed of the disagreement noise")
  p.add_argument("--batch", type=flags.batch_size, default=None, help="forward passes per step")
  p.add_argument("--data-dir", default=None, help="TFDS data_dir holding prepared datasets")
  p.add_argument("--overwrite", action="store_true", help="start the result file over")
  p.add_argument("--quiet", action="store_true", help="no progress bar")


def _gamma(text: str) -> float | None:
  """``--gamma``: a number in (1/2, 1], or ``off``."""
  from rsjax.cohen._recertify_check import parse_gamma

  if text.strip().lower() == "off":
    return None
  try:
    return parse_gamma(text)
  except ValueError as e:
    raise argparse.ArgumentTypeError(str(e)) from None


def prepare_child(args: argparse.Namespace, parent, votes: str | None = None):
  """``(run, loaded)`` of the child: an ``rsjax certify --method recertify`` run
  (``rsjax.app.launch.prepare``) with the parent's data, sigma, noise and radius and the
  child's own settings."""
  from rsjax import Sampling
  from rsjax.cohen._recertify_check import records_digest

  d, s = parent.data, parent.sampling
  alpha = s.alpha if args.alpha is None else args.alpha
  n0 = s.n0 if args.N0 is None else args.N0
  sampling = Sampling(n0=n0, n=args.N, alpha=alpha, noise=s.noise, precision=args.precision)
  options = dict(parent=args.parent, parent_claim=parent.claim_digest(),
                 parent_model=parent.model.fingerprint, parent_records=records_digest(args.parent),
                 fallback=bool(args.fallback))  # fmt: skip
  if args.gamma is not None:  # no option: the runs before the switch verify as they did
    options["gamma"] = args.gamma
  if votes is not None:
    from rsjax.cohen._recertify_check import file_sha256

    options["replay"] = file_sha256(votes)
  return launch.prepare(
    args.model_dir, sampling=sampling, out=args.outfile, dataset=d.name, split=d.split,
    sigma=parent.sigma, sigma_source="flag", method="recertify", options=options,
    rows=launch.DataRange(d.start, d.stop, d.skip), seed=args.seed,
    multiclass=parent.multiclass, pack=args.pack, data_dir=args.data_dir,
  )  # fmt: skip


def run(args: argparse.Namespace) -> int:
  """Runs ``rsjax recertify``; returns the exit status."""
  from rsjax import verify

  try:
    report = verify.verify(args.parent, data_dir=args.data_dir)
  except (verify.VerifyError, ValueError) as e:
    raise CliError(f"the parent run: {e}") from None
  if not report.ok:
    raise CliError(f"the parent run does not verify: {report.summary()}")
  parent = verify.read_run(args.parent)
  votes = None
  if args.replay:
    import os
    import time

    from rsjax.cohen._recertify_check import votes_path

    votes = votes_path(args.parent)
    if not os.path.exists(votes):
      from rsjax.app.parent_votes import store_votes

      start = time.perf_counter()
      try:
        store_votes(parent, args.parent, data_dir=args.data_dir, batch=args.batch)
      except ValueError as e:
        raise CliError(str(e)) from None
      print(f"stored the parent's votes ({parent.sampling.n} samples an input, once per parent) "
            f"in {time.perf_counter() - start:.1f}s: {votes}")  # fmt: skip
  spec, loaded = prepare_child(args, parent, votes)
  execution = launch.Execution(
    batch_size=args.batch, progress=not args.quiet, overwrite=args.overwrite
  )
  out = launch.run(spec, loaded, execution=execution, data_dir=args.data_dir)
  n_parent = parent.sampling.n0 + parent.sampling.n
  print(
    f"recertified {out.written} new inputs in {out.seconds:.2f}s "
    f"({out.compile_seconds:.2f}s of it compiling): {args.N} disagreement samples an input "
    f"against the parent's {n_parent}; results in {out.path}"
  )
  print(f"method: {out.describe}")
  if out.guarantee:
    print(f"guarantee: {out.guarantee}")
  return 0
