"""A certify or predict run: its value (``rsjax.records.spec.RunSpec``) from the flags, what it
loads (model, dataset, denoiser), and the method's plan built from the value.

``rsjax certify`` and ``rsjax predict`` build the value once from their flags
(:func:`run_from_flags`); ``rsjax.app.audit`` loads the same things again from a
run's record (:func:`load`) and plans it the same way (:func:`plan`), so the
audit re-draws exactly the run that ``rsjax verify`` checks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rsjax.app.launch import flags, loading
from rsjax.app.launch.errors import CliError, MismatchError

if TYPE_CHECKING:
  import argparse

  import jax

  from rsjax.engine.driver import Sampling
  from rsjax.records.spec import RunSpec
  from rsjax.runs.method import Certifier, Context

__all__ = [
  "Loaded",
  "architecture_of",
  "batch_of",
  "key",
  "load",
  "pack_of",
  "plan",
  "run_from_flags",
  "settings",
]


@dataclasses.dataclass(frozen=True)
class Loaded:
  """What a run certifies, loaded: the model, its config, the dataset, the pure apply.

  Attributes:
    model: the NNX model (for methods that need more than ``apply_fn``).
    config: the model directory's ``config.json`` (or a checkpoint's).
    dataset: the split certified.
    apply_fn: ``apply_fn(params, x) -> logits`` (composed with a denoiser, if any).
    params: its variables.
    workdir: the model directory, or None.
    denoiser_config: the denoiser's settings digest (``ModelRef.denoiser_config``), or None.
  """

  model: Any
  config: dict
  dataset: Any
  apply_fn: Callable
  params: Any
  workdir: str | None = None
  denoiser_config: str | None = None


def settings(run: RunSpec, batch_size: int | str = 1000) -> Sampling:
  """The ``rsjax.Sampling`` of a run (``batch_size`` changes speed, never counts)."""
  from rsjax import Sampling

  return Sampling.from_record(run.sampling, batch_size=batch_size)


def key(run: RunSpec) -> jax.Array:
  """The run's ``jax.random.key``: its seed folded with ``key_fold_in`` and its claim's digest
  (``RunSpec.key_path``; ``rsjax.records.spec.KEY_DERIVATION``)."""
  import jax

  k = jax.random.key(run.seed)
  for v in run.key_path():
    k = jax.random.fold_in(k, v)
  return k


def _load_model(
  *, model_dir, torch_checkpoint, torch_arch, normalize, data_dir, dataset, split, resize=None
):
  """``(model, config, dataset_name, dataset)`` of a model directory or PyTorch checkpoint."""
  if torch_checkpoint is not None:
    if model_dir is not None:
      raise CliError("give either MODEL_DIR or --torch-checkpoint, not both")
    if dataset is None:
      raise CliError("--dataset is required with --torch-checkpoint")
    ds = loading.open_dataset(dataset, split, data_dir)
    model, config = loading.open_torch_checkpoint(
      torch_checkpoint, torch_arch, normalize, ds.input_shape
    )
    return model, config, ds
  if model_dir is None:
    raise CliError(
      "give MODEL_DIR (from 'rsjax train' or 'rsjax convert') or --torch-checkpoint F.pth"
    )
  if normalize is not None:
    raise CliError(
      "--normalize works with --torch-checkpoint (a model directory keeps its normalization)"
    )
  model, config = loading.open_model_dir(model_dir)
  loading.warn_if_unfinished(model_dir, config)
  name = dataset or config.get("dataset")
  if not name:
    raise CliError("--dataset is required (the model directory does not name one)")
  ds = loading.open_dataset(name, split, data_dir)
  want = config.get("input_shape")
  have = tuple(ds.input_shape)
  if resize is not None and len(have) == 3:  # the resize stage feeds the classifier
    have = (*parse_size(resize), have[-1])
  if want is not None and tuple(want) != have:
    shape = lambda s: "x".join(str(d) for d in s)  # noqa: E731
    raise MismatchError(
      f"model expects {shape(want)} inputs, {name} is "
      f"{shape(have)}{' after --resize' if resize else ''} (the model was trained on "
      f"{config.get('dataset', 'another dataset')})"
    )
  return model, config, ds


def parse_size(text: str) -> tuple[int, int]:
  """``"224"`` or ``"224x224"`` -> ``(224, 224)``."""
  parts = str(text).lower().split("x")
  try:
    size = tuple(int(p) for p in parts)
  except ValueError:
    size = ()
  if len(size) == 1:
    size = size * 2
  if len(size) != 2 or min(size) < 1:
    raise CliError(f"--resize must be N or HxW (e.g. 224x224), got {text!r}")
  return size  # type: ignore[return-value]


def _packed(model, pack: int):
  """``model`` with its narrow stage packed ``pack`` samples a row (1: as it is)."""
  from rsjax import models

  try:
    return models.pack_narrow_stage(model, int(pack))
  except ValueError as e:  # a model that cannot be packed: the run does not fit it
    raise MismatchError(f"--pack {pack}: {e}") from None


def pack_of(run: RunSpec) -> int:
  """The narrow-stage packing a run certified with (``--pack``; a record without it: 1)."""
  return int(run.sampling.get("pack", 1))


def _apply(model, denoiser, sigma, resize=None):
  """``(apply_fn, params, denoiser digest or None)`` of the model as a run certifies it."""
  from rsjax import models

  apply_fn, params = models.to_apply_fn(model)
  if resize is not None:  # bicubic antialiased, between denoiser and classifier
    from rsjax.models.denoise.compose import Resized

    apply_fn = Resized(apply_fn, parse_size(resize))
  if denoiser is None:
    return apply_fn, params, None
  # denoised smoothing: classifier(denoiser(x + delta))
  return loading.open_denoised(denoiser, apply_fn, params, sigma=sigma)


def run_from_flags(args: argparse.Namespace) -> tuple[RunSpec, Loaded]:
  """``(run, loaded)``: the run value of ``rsjax certify`` / ``rsjax predict`` flags and what
  it loads. ``--sigma`` defaults to the model's training sigma."""
  from rsjax import methods
  from rsjax.records.canonical import model_config_digest
  from rsjax.records.spec import DataRef, ModelRef, RunSpec
  from rsjax.runs import record, runner

  model, config, ds = _load_model(
    model_dir=args.model_dir,
    torch_checkpoint=args.torch_checkpoint,
    torch_arch=args.torch_arch,
    normalize=args.normalize,
    data_dir=args.data_dir,
    dataset=args.dataset,
    split=args.split,
    resize=getattr(args, "resize", None),
  )
  sigma, sigma_source = _flag_sigma(args, config)
  resize = getattr(args, "resize", None)
  resize = None if resize is None else "x".join(map(str, parse_size(resize)))
  pack = int(getattr(args, "pack", 1))
  model = _packed(model, pack)
  apply_fn, params, denoiser_config = _apply(model, args.denoiser, sigma, resize)
  data = DataRef(
    name=ds.name,
    split=args.split,
    size=len(ds),
    input_shape=tuple(int(d) for d in ds.input_shape),
    num_classes=int(ds.num_classes),
    start=args.start,
    stop=args.max,
    skip=args.skip,
    file_sha256=loading.file_sha256(ds.name),
  )
  if not data.indices():
    raise CliError(
      f"no input selected: {ds.name} {args.split} has {len(ds)} inputs, "
      f"--start {args.start} --max {args.max}"
    )
  torch = args.torch_checkpoint is not None
  ref = ModelRef(
    fingerprint=runner.fingerprint(params),
    architecture=architecture_of(config, torch=torch),
    source="torch_checkpoint" if torch else "model_dir",
    path=args.torch_checkpoint if torch else args.model_dir,
    torch_arch=args.torch_arch if torch else None,
    normalize=args.normalize if torch else None,
    denoiser=args.denoiser,
    denoiser_config=denoiser_config,
    resize=resize,
    config=model_config_digest(config),
  )
  command = getattr(args, "command", "certify")
  method_name = getattr(args, "method", "cohen") if command == "certify" else "cohen"
  method = methods.get(method_name)
  options = {o.name: getattr(args, o.name) for o in method.options} if command == "certify" else {}
  flags.refuse_other_options(args, method)
  s = _flag_sampling(args)
  run = RunSpec(
    model=ref,
    data=data,
    sigma=float(sigma),
    sigma_source=sigma_source,
    # --pack changes the arithmetic, as the precision does; named only when on, so the
    # records of unpacked runs (and of older rsjax) read the same.
    sampling={**record.sampling_fields(s), **({"pack": pack} if pack != 1 else {})},
    method=method_name,
    options=options,
    multiclass=bool(getattr(args, "multiclass", False)),
    seed=args.seed,
    command=command,
    versions=record.versions(),
    out=args.outfile,
  )
  return run, Loaded(model, config, ds, apply_fn, params, args.model_dir, denoiser_config)


def _flag_sigma(args: argparse.Namespace, config: dict) -> tuple[float, str]:
  """``(sigma, source)``: ``--sigma`` (``"flag"``), else the model's training sigma
  (``"model"``), which must be > 0."""
  if args.sigma is not None:
    return args.sigma, "flag"
  if "sigma" not in config:
    raise CliError("--sigma is required (the model does not record its training sigma)")
  sigma = float(config["sigma"])
  if not sigma > 0:
    raise CliError(
      f"the model in {args.model_dir or args.torch_checkpoint!r} was trained "
      f"without noise (sigma {sigma:g}): pass the certification noise level with --sigma"
    )
  return sigma, "model"


def architecture_of(config: dict, *, torch: bool) -> str | None:
  """The architecture a run names for a model of this configuration (a PyTorch
  checkpoint's ``torch_arch``, else the configuration's ``model``)."""
  return config.get("torch_arch" if torch else "model") or config.get("model")


def batch_of(args: argparse.Namespace) -> int | str | None:
  """The ``--batch`` of a certify or predict command: as given, else ``"auto"`` with a
  denoiser (its memory per sample is unknown: measured), else None (not told: a timed
  probe's where it pays, ``rsjax.app.launch.execute.batch_choice``)."""
  batch = getattr(args, "batch", None)
  if batch is None:
    return "auto" if getattr(args, "denoiser", None) else None
  return batch


def _flag_sampling(args):
  from rsjax import Sampling

  try:
    return Sampling(
      n0=getattr(args, "N0", 100),
      n=args.N,
      alpha=args.alpha,
      batch_size=batch_of(args),
      noise=args.noise,
      precision=args.precision,
    )
  except ValueError as e:
    raise CliError(str(e)) from None


def load(
  run: RunSpec,
  *,
  model_dir: str | None = None,
  torch_checkpoint: str | None = None,
  denoiser: str | None = None,
  data_dir: str | None = None,
) -> Loaded:
  """What ``run`` certified, loaded again (``rsjax audit``): the model from ``model_dir`` or
  ``torch_checkpoint`` (with the run's ``--torch-arch`` / ``--normalize``, packed as the run
  was: :func:`pack_of`), the denoiser
  from ``denoiser`` (default: the recorded directory), the run's dataset split."""
  model, config, ds = _load_model(
    model_dir=model_dir,
    torch_checkpoint=torch_checkpoint,
    torch_arch=run.model.torch_arch,
    normalize=run.model.normalize,
    data_dir=data_dir,
    dataset=run.data.name,
    resize=run.model.resize,
    split=run.data.split,
  )  # a run's dataset name is never empty (RunSpec refuses it)
  if run.model.denoiser is not None and denoiser is None:
    denoiser = run.model.denoiser
  model = _packed(model, pack_of(run))
  apply_fn, params, denoiser_config = _apply(model, denoiser, run.sigma, run.model.resize)
  return Loaded(model, config, ds, apply_fn, params, model_dir, denoiser_config)


def plan(
  run: RunSpec, loaded: Loaded, *, batch_size: int | str = 1000, data_dir: str | None = None
) -> tuple[Context, Certifier]:
  """The context of ``run`` over what it loaded, and its method's certifier
  (``rsjax.methods``: ``Method.build``)."""
  from rsjax import methods
  from rsjax.runs.method import Context

  ds = loaded.dataset
  try:
    ctx = Context(
      key=key(run),
      model=loaded.model,
      apply_fn=loaded.apply_fn,
      params=loaded.params,
      dataset=ds,
      sigma=run.sigma,
      settings=settings(run, batch_size),
      multiclass=run.multiclass,
      workdir=loaded.workdir,
      load_split=lambda split: loading.open_dataset(ds.name, split, data_dir),
    )
    options = {k: tuple(v) if isinstance(v, list) else v for k, v in run.options.items()}
    return ctx, methods.get(run.method).build(ctx, **options)
  except ValueError as e:
    raise CliError(str(e)) from None
