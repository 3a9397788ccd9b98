"""A certify or predict run from its flags: what it samples (model, dataset, inputs,
key), with which settings (``rsjax.Sampling``), by which method (its plan), and the
run-wide part of its certificate record.

``rsjax certify`` and ``rsjax predict`` start here; ``rsjax.audit`` starts here
again from a run's record to draw its counts once more.
"""

from __future__ import annotations

from rsjax.launch import identity, loading
from rsjax.launch.errors import CliError

__all__ = ["sampling", "sampling_run", "method_plan", "certificate_header"]


def sampling(args):
  """The ``rsjax.Sampling`` of the certify flags."""
  from rsjax import Sampling
  return Sampling(n0=args.N0, n=args.N, alpha=args.alpha, batch_size=args.batch, noise=args.noise,
                  precision=args.precision)


def sampling_run(args):
  """What ``certify`` and ``predict`` share: the model (a workdir of 'rsjax train' or
  'rsjax convert', or a PyTorch checkpoint), its config, the dataset, the model's
  pure apply, the selected indices and the key. Fills in ``args.sigma`` (default:
  the training sigma) and ``args.run_record`` (:func:`rsjax.launch.identity.run_record`)."""
  import jax
  from rsjax import models, runner
  if args.torch_checkpoint is not None:
    if args.model_dir is not None:
      raise CliError("give either MODEL_DIR or --torch-checkpoint, not both")
    if args.dataset is None:
      raise CliError("--dataset is required with --torch-checkpoint")
    dataset_name = args.dataset
    ds = loading.load_dataset(dataset_name, args.split, args.data_dir)
    model, config = loading.load_torch(args.torch_checkpoint, args.torch_arch, args.normalize,
                                       ds.input_shape)
  else:
    if args.model_dir is None:
      raise CliError("give MODEL_DIR (from 'rsjax train' or 'rsjax convert') or "
                     "--torch-checkpoint F.pth")
    if args.normalize is not None:
      raise CliError("--normalize works with --torch-checkpoint (a model directory keeps its "
                     "normalization)")
    model, config = loading.load_model(args.model_dir)
    loading.warn_if_unfinished(args.model_dir, config)
    dataset_name = args.dataset or config.get("dataset")
    if dataset_name is None:
      raise CliError("--dataset is required (the model directory does not name one)")
    ds = loading.load_dataset(dataset_name, args.split, args.data_dir)
    want = config.get("input_shape")
    if want is not None and tuple(want) != tuple(ds.input_shape):
      shape = lambda s: "x".join(str(d) for d in s)  # noqa: E731
      raise CliError(f"model expects {shape(want)} inputs, {dataset_name} is "
                     f"{shape(ds.input_shape)} (the model was trained on "
                     f"{config.get('dataset', 'another dataset')})")
  if args.sigma is None:
    if "sigma" not in config:
      raise CliError("--sigma is required (the model does not record its training sigma)")
    args.sigma = float(config["sigma"])
    if not args.sigma > 0:
      raise CliError(f"the model in {args.model_dir or args.torch_checkpoint!r} was trained "
                     f"without noise (sigma {args.sigma:g}): pass the certification noise "
                     "level with --sigma")
  apply_fn, params = models.to_apply_fn(model)
  if args.denoiser is not None:  # denoised smoothing: classifier(denoiser(x + delta))
    apply_fn, params = loading.load_denoised(args.denoiser, apply_fn, params, sigma=args.sigma)
  indices = runner.select_indices(len(ds), skip=args.skip, start=args.start, stop=args.max)
  if not len(indices):
    raise CliError(f"no input selected: {dataset_name} {args.split} has {len(ds)} inputs, "
                   f"--start {args.start} --max {args.max}")
  args.run_record = identity.run_record(args, config, dataset_name, params)
  return model, config, ds, apply_fn, params, indices, jax.random.key(args.seed)


def method_plan(args, key, model, apply_fn, params, ds):
  """The registry entry of ``--method`` built with its flags (``rsjax.methods``)."""
  from rsjax import methods
  method = methods.METHODS[args.method]
  for other in methods.METHODS.values():
    for o in other.options:
      if o not in method.options and getattr(args, o.name) != o.default:
        users = [m.name for m in methods.METHODS.values() if o in m.options]
        raise CliError(f"--{o.name.replace('_', '-')} works with --method {' or '.join(users)}, "
                       f"not {args.method}")
  try:
    ctx = methods.Context(
        key=key, model=model, apply_fn=apply_fn, params=params, dataset=ds, sigma=args.sigma,
        sampling=sampling(args),
        multiclass=args.multiclass, workdir=args.model_dir,
        load_split=lambda split: loading.load_dataset(ds.name, split, args.data_dir))
    return method.plan(ctx, **{o.name: getattr(args, o.name) for o in method.options})
  except ValueError as e:
    raise CliError(str(e)) from None


def certificate_header(args, ds, details=None) -> dict:
  """The run-wide part of the certificate record (``rsjax.record.header``)."""
  from rsjax import budgeted, methods, record
  method = methods.METHODS[args.method]
  options = {o.name: getattr(args, o.name) for o in method.options}
  grid = options.get("grid")
  return record.header(
      method=args.method, sampling=sampling(args), sigma=args.sigma, seed=args.seed,
      model=args.run_record["model"], input_shape=ds.input_shape, num_classes=ds.num_classes,
      multiclass=args.multiclass, settings=options, dataset=ds.name,
      budget=None if grid is None else budgeted.Budget(grid=grid), details=details)
