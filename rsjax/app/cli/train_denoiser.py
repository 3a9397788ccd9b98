"""``rsjax train-denoiser``: a denoiser for denoised smoothing.

``rsjax train-denoiser --dataset mnist5k --objective mse --sigma 0.25 --out DIR`` trains a DnCNN
(``--objective stability --classifier MODEL_DIR`` against a frozen classifier; ``--objective
ddpm`` a small DDPM UNet); ``rsjax certify MODEL_DIR OUT --denoiser DIR`` certifies
``classifier(denoiser(x + delta))`` (``rsjax.app.launch.loading.open_denoised``).
"""

from __future__ import annotations

import argparse
import os

from rsjax.app import launch
from rsjax.app.cli import flags
from rsjax.app.cli._args import CliError

__all__ = ["HELP", "add_arguments", "run"]

HELP = "train a denoiser for denoised smoothing (DnCNN: mse / stability; a small DDPM)"


def add_arguments(p: argparse.ArgumentParser) -> None:
  """The flags of ``rsjax train-denoiser``."""
  p.add_argument("--dataset", required=True, help="image dataset (e.g. mnist5k)")
  p.add_argument("--data-dir", default=None, help="folder of prepared TFDS datasets")
  p.add_argument(
    "--objective",
    default="mse",
    choices=["mse", "stability", "ddpm"],
    help="mse: |D(x+d) - x|^2; stability: CE(f(D(x+d)), f(x)) against --classifier "
    "(Salman et al.); ddpm: a DDPM noise model for one-step diffusion denoising",
  )
  flags.positive_flag(p, "--sigma", "training noise level (mse, stability)", real=True)
  p.add_argument(
    "--classifier",
    default=None,
    metavar="MODEL_DIR",
    help="the frozen classifier of --objective stability",
  )
  p.add_argument(
    "--init",
    default=None,
    metavar="DIR",
    help="start from this denoiser (e.g. stability after mse: Stab+MSE)",
  )
  flags.positive_flag(p, "--depth", "DnCNN conv layers", default=17)
  flags.positive_flag(p, "--features", "DnCNN width", default=64)
  p.add_argument(
    "--unet-channels",
    type=flags.positive_int,
    nargs="+",
    default=[32, 64],
    help="ddpm: UNet widths per level (attention at the last level)",
  )
  flags.positive_flag(p, "--layers-per-block", "ddpm: resnets per level", default=1)
  flags.positive_flag(p, "--norm-groups", "ddpm: group norm groups", default=8)
  flags.positive_flag(p, "--t-max", "ddpm: train on timesteps below this only (default: all 1000)")
  flags.positive_flag(p, "--epochs", "training epochs", default=10)
  flags.positive_flag(p, "--batch", "batch size", default=64)
  flags.positive_flag(p, "--lr", "Adam learning rate", default=1e-3, real=True)
  p.add_argument("--seed", type=int, default=0, help="PRNG seed")
  p.add_argument("--out", required=True, help="output directory")
  p.add_argument("--quiet", action="store_true", help="no per-epoch lines")


def run(args: argparse.Namespace) -> int:
  """Runs ``rsjax train-denoiser``; returns the exit status."""
  import jax

  from rsjax import models
  from rsjax.models.denoise import diffusion, train, workdir

  if os.path.exists(os.path.join(args.out, workdir.DENOISER_FILE)):
    raise CliError(f"{args.out!r} already holds a denoiser; use a new --out")
  ds = launch.open_dataset(args.dataset, "train", args.data_dir)
  x, _ = ds.arrays()
  if x.ndim != 4:
    raise CliError(f"{args.dataset} inputs are not images ([H, W, C]); a denoiser needs images")
  classifier = _frozen_classifier(args, x.shape[1:])
  if args.objective != "ddpm" and args.sigma is None:
    raise CliError(f"--objective {args.objective} needs --sigma")
  kind, kwargs = _architecture(args, x.shape[-1])
  cfg, model, kwargs = _training_and_model(args, kind, kwargs)
  schedule: dict = {}
  alphas = diffusion.linear_schedule(**schedule) if kind == "ddpm" else None
  history = train.train_denoiser(
    jax.random.key(args.seed),
    model,
    x,
    cfg,
    classifier=classifier,
    alphas_cumprod=alphas,
    log=None if args.quiet else print,
  )
  config = _denoiser_config(args, kind, kwargs, list(x.shape[1:]), history)
  if kind == "ddpm":
    config["schedule"] = schedule
  workdir.save_denoiser(args.out, model, config)
  print(
    f"trained a {kind} denoiser ({args.objective}, {models.count_params(model):,} "
    f"parameters; final loss {history[-1]['loss']:.5f}); saved in {args.out}"
  )
  return 0


def _frozen_classifier(args: argparse.Namespace, input_shape: tuple[int, ...]):
  """The ``apply_fn`` of ``--classifier`` for ``--objective stability`` (None otherwise).

  Args:
    args: the parsed flags.
    input_shape: ``(H, W, C)`` of the dataset's inputs, which the classifier must take.

  Raises:
    CliError: stability without a usable classifier of these inputs, or a classifier
      without stability.
  """
  from rsjax import models

  if args.objective != "stability":
    if args.classifier is not None:
      raise CliError("--classifier works with --objective stability only")
    return None
  if args.classifier is None:
    raise CliError("--objective stability needs --classifier MODEL_DIR (the frozen classifier)")
  try:
    model_c, config_c = models.load_model(args.classifier)
  except (FileNotFoundError, ValueError) as e:
    raise CliError(f"--classifier: no usable trained model in {args.classifier!r}: {e}") from None
  if tuple(config_c.get("input_shape", input_shape)) != tuple(input_shape):
    raise CliError(
      f"the classifier expects {config_c['input_shape']} inputs, {args.dataset} is "
      f"{list(input_shape)}"
    )
  return models.to_apply_fn(model_c)


def _architecture(args: argparse.Namespace, channels: int) -> tuple[str, dict]:
  """``(kind, model_kwargs)`` of a new denoiser of images with ``channels`` channels:
  a DDPM UNet for ``--objective ddpm``, else a DnCNN."""
  if args.objective == "ddpm":
    n = len(args.unet_channels)
    return "ddpm", dict(
      in_channels=channels,
      out_channels=channels,
      block_out_channels=list(args.unet_channels),
      layers_per_block=args.layers_per_block,
      down_block_types=["AttnDownBlock2D" if i == n - 1 else "DownBlock2D" for i in range(n)],
      up_block_types=["AttnUpBlock2D" if i == 0 else "UpBlock2D" for i in range(n)],
      norm_num_groups=args.norm_groups,
    )
  return "dncnn", dict(channels=int(channels), depth=args.depth, features=args.features)


def _training_and_model(args: argparse.Namespace, kind: str, kwargs: dict):
  """``(training settings, model, model_kwargs)``: the model the ``--init`` denoiser (its
  own kwargs) or a new ``kind`` one built from ``kwargs``.

  Raises:
    CliError: bad training settings, or an ``--init`` that is not a ``kind`` denoiser.
  """
  from rsjax.models.denoise import train, workdir

  try:
    cfg = train.DenoiserTraining(
      objective=args.objective,
      sigma=args.sigma or 0.0,
      epochs=args.epochs,
      batch_size=args.batch,
      lr=args.lr,
      t_max=args.t_max,
    )
    if args.init is not None:
      model, init_config = workdir.load_denoiser(args.init)
      if init_config["kind"] != kind:
        raise CliError(f"--init holds a {init_config['kind']} denoiser, not a {kind}")
      kwargs = init_config["model_kwargs"]
    else:
      model = workdir.build_denoiser(kind, kwargs, rngs=args.seed)
  except (FileNotFoundError, ValueError) as e:
    raise CliError(str(e)) from None
  return cfg, model, kwargs


def _denoiser_config(
  args: argparse.Namespace, kind: str, kwargs: dict, input_shape: list[int], history: list
) -> dict:
  """The ``config.json`` of the trained denoiser: what rebuilds it and how it was trained."""
  return {
    "kind": kind,
    "model_kwargs": kwargs,
    "input_shape": input_shape,
    "dataset": args.dataset,
    "objective": args.objective,
    "sigma": args.sigma,
    "classifier": args.classifier,
    "init": args.init,
    "seed": args.seed,
    "train": {"epochs": args.epochs, "batch_size": args.batch, "lr": args.lr, "t_max": args.t_max},
    "history": history,
  }
