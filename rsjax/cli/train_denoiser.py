"""``rsjax train-denoiser``: a denoiser for denoised smoothing.

``rsjax train-denoiser --dataset mnist5k --objective mse --sigma 0.25 --out DIR`` trains a DnCNN
(``--objective stability --classifier MODEL_DIR`` against a frozen classifier; ``--objective
ddpm`` a small DDPM UNet); ``rsjax certify MODEL_DIR OUT --denoiser DIR`` certifies
``classifier(denoiser(x + delta))`` (``rsjax.launch.loading.open_denoised``).
"""

from __future__ import annotations

import argparse
import os

from rsjax import launch
from rsjax.launch import flags
from rsjax.launch.errors import CliError

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
  p.add_argument(
    "--sigma", type=flags.positive_float, default=None, help="training noise level (mse, stability)"
  )
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
  p.add_argument("--depth", type=flags.positive_int, default=17, help="DnCNN conv layers")
  p.add_argument("--features", type=flags.positive_int, default=64, help="DnCNN width")
  p.add_argument(
    "--unet-channels",
    type=flags.positive_int,
    nargs="+",
    default=[32, 64],
    help="ddpm: UNet widths per level (attention at the last level)",
  )
  p.add_argument(
    "--layers-per-block", type=flags.positive_int, default=1, help="ddpm: resnets per level"
  )
  p.add_argument(
    "--norm-groups", type=flags.positive_int, default=8, help="ddpm: group norm groups"
  )
  p.add_argument(
    "--t-max",
    type=flags.positive_int,
    default=None,
    help="ddpm: train on timesteps below this only (default: all 1000)",
  )
  p.add_argument("--epochs", type=flags.positive_int, default=10, help="training epochs")
  p.add_argument("--batch", type=flags.positive_int, default=64, help="batch size")
  p.add_argument("--lr", type=flags.positive_float, default=1e-3, help="Adam learning rate")
  p.add_argument("--seed", type=int, default=0, help="PRNG seed")
  p.add_argument("--out", required=True, help="output directory")
  p.add_argument("--quiet", action="store_true", help="no per-epoch lines")


def run(args: argparse.Namespace) -> int:
  """Runs ``rsjax train-denoiser``; returns the exit status."""
  import jax

  from rsjax import models
  from rsjax.denoise import diffusion, train, workdir

  if os.path.exists(os.path.join(args.out, workdir.DENOISER_FILE)):
    raise CliError(f"{args.out!r} already holds a denoiser; use a new --out")
  ds = launch.open_dataset(args.dataset, "train", args.data_dir)
  x, _ = ds.arrays()
  if x.ndim != 4:
    raise CliError(f"{args.dataset} inputs are not images ([H, W, C]); a denoiser needs images")
  classifier = None
  if args.objective == "stability":
    if args.classifier is None:
      raise CliError("--objective stability needs --classifier MODEL_DIR (the frozen classifier)")
    try:
      model_c, config_c = models.load_model(args.classifier)
    except (FileNotFoundError, ValueError) as e:
      raise CliError(f"--classifier: no usable trained model in {args.classifier!r}: {e}") from None
    if tuple(config_c.get("input_shape", x.shape[1:])) != tuple(x.shape[1:]):
      raise CliError(
        f"the classifier expects {config_c['input_shape']} inputs, {args.dataset} is "
        f"{list(x.shape[1:])}"
      )
    classifier = models.to_apply_fn(model_c)
  elif args.classifier is not None:
    raise CliError("--classifier works with --objective stability only")
  if args.objective != "ddpm" and args.sigma is None:
    raise CliError(f"--objective {args.objective} needs --sigma")
  if args.objective == "ddpm":
    kind = "ddpm"
    n = len(args.unet_channels)
    kwargs = dict(
      in_channels=x.shape[-1],
      out_channels=x.shape[-1],
      block_out_channels=list(args.unet_channels),
      layers_per_block=args.layers_per_block,
      down_block_types=["AttnDownBlock2D" if i == n - 1 else "DownBlock2D" for i in range(n)],
      up_block_types=["AttnUpBlock2D" if i == 0 else "UpBlock2D" for i in range(n)],
      norm_num_groups=args.norm_groups,
    )
  else:
    kind = "dncnn"
    kwargs = dict(channels=int(x.shape[-1]), depth=args.depth, features=args.features)
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
  schedule = {}
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
  config = {
    "kind": kind,
    "model_kwargs": kwargs,
    "input_shape": list(x.shape[1:]),
    "dataset": args.dataset,
    "objective": args.objective,
    "sigma": args.sigma,
    "classifier": args.classifier,
    "init": args.init,
    "seed": args.seed,
    "train": {"epochs": args.epochs, "batch_size": args.batch, "lr": args.lr, "t_max": args.t_max},
    "history": history,
  }
  if kind == "ddpm":
    config["schedule"] = schedule
  workdir.save_denoiser(args.out, model, config)
  print(
    f"trained a {kind} denoiser ({args.objective}, {models.count_params(model):,} "
    f"parameters; final loss {history[-1]['loss']:.5f}); saved in {args.out}"
  )
  return 0
