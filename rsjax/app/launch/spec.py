"""A certify or predict run: its value (``rsjax.records.spec.RunSpec``), built by one
constructor (:func:`prepare`) with what it loads (model, dataset, denoiser), and the method's
plan built from the value.

``rsjax certify`` / ``predict`` / ``recertify`` (their flags), ``rsjax demo``, the experiments
and a Python caller build runs with :func:`prepare`; ``rsjax.app.audit`` loads the same things
again from a run's record (:func:`load`) and plans it the same way (:func:`plan`), so the
audit re-draws exactly the run that ``rsjax verify`` checks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from rsjax.app.launch import loading
from rsjax.app.launch.errors import MismatchError, RunError

if TYPE_CHECKING:
  import jax

  from rsjax.engine.driver import Sampling
  from rsjax.records.spec import RunSpec
  from rsjax.runs.method import Certifier, Context

__all__ = [
  "DataRange",
  "Loaded",
  "TorchCheckpoint",
  "architecture_of",
  "key",
  "load",
  "plan",
  "prepare",
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


@dataclasses.dataclass(frozen=True)
class TorchCheckpoint:
  """A PyTorch checkpoint to certify (``rsjax.models.load_torch``): its ``path``, its ``arch``
  (None: its 'arch' entry or recognized from its keys) and input ``normalize`` (None: its
  normalization layer's, or the architecture's). With ``module`` (``FILE.pt`` or
  ``FILE.py:CLASS``), any PyTorch module through ``torch.export``
  (``rsjax.models.load_torch_module``): ``path`` is then its state dict, or ``module`` itself
  (none), and ``normalize`` None means none."""

  path: str
  arch: str | None = None
  normalize: str | None = None
  module: str | None = None


@dataclasses.dataclass(frozen=True)
class DataRange:
  """The declared dataset indices ``start, start + skip, ...`` below ``stop`` (-1: the end)."""

  start: int = 0
  stop: int = -1
  skip: int = 1


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


def _load_model(model_dir, torch: TorchCheckpoint | None, dataset, split, data_dir, resize):
  """``(model, config, dataset)`` of a model directory or PyTorch checkpoint."""
  if torch is not None:
    if model_dir is not None:
      raise RunError("model: a model directory or a PyTorch checkpoint, not both", "model")
    if dataset is None:
      raise RunError("dataset is required with a PyTorch checkpoint", "dataset")
    ds = loading.open_dataset(dataset, split, data_dir)
    if torch.module is not None:
      weights = None if torch.path == torch.module else torch.path
      model, config, _ = loading.open_torch_module(
        torch.module, weights, torch.normalize, ds.input_shape
      )
    else:
      model, config = loading.open_torch_checkpoint(
        torch.path, torch.arch, torch.normalize, ds.input_shape
      )
    loading.check_classes(config.get("num_classes"), ds, torch.module or torch.path)
    return model, config, ds
  if model_dir is None:
    raise RunError("model: give a model directory or a PyTorch checkpoint", "model")
  model, config = loading.open_model_dir(model_dir)
  loading.warn_if_unfinished(model_dir, config)
  name = dataset or config.get("dataset")
  if not name:
    raise RunError("dataset is required (the model directory does not name one)", "dataset")
  ds = loading.open_dataset(name, split, data_dir)
  want = config.get("input_shape")
  have = tuple(ds.input_shape)
  if resize is not None and len(have) == 3:  # the resize stage feeds the classifier
    have = (*parse_size(resize), have[-1])
  if config.get("input_encoding") == "ablation" and len(have) == 3:  # rsjax.ablation's
    have = (*have[:2], 2 * have[2])  # encoding: (x, 1 - x) at kept pixels, 2 x the channels
  if want is not None and tuple(want) != have:
    shape = lambda s: "x".join(str(d) for d in s)  # noqa: E731
    raise MismatchError(
      f"model expects {shape(want)} inputs, {name} is "
      f"{shape(have)}{' after --resize' if resize else ''} (the model was trained on "
      f"{config.get('dataset', 'another dataset')})",
      "dataset",
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
    raise RunError(f"resize must be N or HxW (e.g. 224x224), got {text!r}", "resize")
  return size  # type: ignore[return-value]


def _packed(model, pack: int):
  """``model`` with its narrow stage packed ``pack`` samples a row (1: as it is)."""
  from rsjax import models

  try:
    return models.pack_narrow_stage(model, int(pack))
  except ValueError as e:  # a model that cannot be packed: the run does not fit it
    raise MismatchError(f"pack={pack}: {e}", "pack") from None


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


def prepare(
  model: str | TorchCheckpoint | Loaded,
  *,
  sampling: Sampling,
  out: str | None = None,
  dataset: str | None = None,
  split: str = "test",
  sigma: float | None = None,
  method: str = "cohen",
  options: Mapping[str, Any] | None = None,
  rows: DataRange = DataRange(),
  seed: int = 0,
  multiclass: bool = False,
  pack: int = 1,
  resize: str | None = None,
  denoiser: str | None = None,
  data_dir: str | None = None,
  path: str | None = None,
  key_fold_in: tuple[int, ...] = (),
  sigma_source: str = "library",
  command: str = "certify",
) -> tuple[RunSpec, Loaded]:
  """``(run, loaded)``: the value of a certify (or predict) run and what it certifies, the
  one constructor of a run (``rsjax certify`` is one caller; :func:`run` certifies it).

  Args:
    model: a model directory (``rsjax train`` / ``rsjax convert``), a :class:`TorchCheckpoint`,
      or a :class:`Loaded` already in memory (then ``dataset``, ``pack``, ``resize`` and
      ``denoiser`` are its own: left at their defaults).
    sampling: the ``rsjax.Sampling`` (``n0``, ``n``, ``alpha``, noise, precision; its batch
      size is speed only: ``Execution.batch_size``).
    out: the result file.
    dataset, split, data_dir: the inputs (default dataset: the one the model names).
    sigma: the noise level (None: the model's training sigma).
    method, options: the method (``rsjax.methods``) and its options (others at their defaults).
    rows: the declared dataset indices.
    seed, key_fold_in: the key, ``jax.random.key(seed)`` folded with these, then the claim.
    multiclass: the multiclass radius with simultaneous bounds.
    pack: the model's narrow stage packed this many samples a row (1: as it is).
    resize: ``"HxW"``: inputs resized before the classifier.
    denoiser: a denoiser directory (denoised smoothing).
    path: the model's path as recorded (default: as given).
    sigma_source: who chose a given ``sigma`` (``"library"``, ``"flag"``).
    command: ``"certify"`` or ``"predict"`` (no method options).

  Raises:
    RunError: an argument that cannot be used (its name in ``argument``).
    MismatchError: a dataset, resize, pack or denoiser that does not fit the model.
  """
  from rsjax import methods
  from rsjax.records.canonical import model_config_digest
  from rsjax.records.spec import ModelRef, RunSpec
  from rsjax.runs import record, runner

  if isinstance(model, Loaded):
    if (dataset, pack, resize, denoiser) != (None, 1, None, None):
      raise RunError("model: a Loaded model takes no dataset, pack, resize or denoiser", "model")
    loaded, torch = model, None
    sigma, sigma_source = _sigma(sigma, sigma_source, loaded.config, loaded.workdir)
  else:
    torch = model if isinstance(model, TorchCheckpoint) else None
    model_dir = None if torch or model is None else str(model)
    loaded, sigma, sigma_source = _open(
      model_dir, torch, dataset, split, data_dir, sigma, sigma_source, pack, resize, denoiser
    )
  data = _data_ref(loaded.dataset, split, rows)
  if command == "certify":
    known = {o.name: o.default for o in methods.get(method).options}
    other = sorted(set(options or {}) - set(known))
    if other:
      raise RunError(f"options: method {method} has no option {other[0]!r}", "options")
    options = _bound(methods.get(method), known | dict(options or {}), out)
  ref = ModelRef(
    fingerprint=runner.fingerprint(loaded.params),
    architecture=architecture_of(loaded.config, torch=torch is not None),
    source="torch_checkpoint" if torch else "model_dir",
    path=path or _recorded(torch.path if torch else loaded.workdir, out),
    torch_arch=torch.arch if torch else None,
    normalize=torch.normalize if torch else None,
    denoiser=denoiser,
    denoiser_config=loaded.denoiser_config,
    resize=resize and "x".join(map(str, parse_size(resize))),
    config=model_config_digest(loaded.config),
  )
  run = RunSpec(
    model=ref,
    data=data,
    sigma=float(sigma),
    sigma_source=sigma_source,
    sampling=record.run_sampling(sampling, pack=pack),
    method=method if command == "certify" else "cohen",
    options=options if command == "certify" else {},
    multiclass=multiclass,
    seed=seed,
    key_fold_in=tuple(key_fold_in),
    command=command,
    versions=record.versions(),
    out=out,
  )
  return run, loaded


def _bound(method, options: dict, out: str | None) -> dict:
  """A run's options with the facts of the files they name (``Method.bind``: Dual RS's
  experts), their paths then recorded relative to the result file's folder."""
  try:
    options = method.bound(options)
  except ValueError as e:
    raise RunError(str(e), "options") from None
  return method.located(options, lambda _role, p: _recorded(p, out))


def _recorded(path: str | None, out: str | None) -> str | None:
  """A path as the record keeps it: relative to the result file's folder
  (``rsjax.records.paths``), as given without a result file."""
  from rsjax.records import paths

  return path if path is None or out is None else paths.relative_to(path, out)


def _data_ref(ds, split: str, rows: DataRange):
  """The ``DataRef`` of ``rows`` of the dataset ``ds`` (:func:`prepare`)."""
  from rsjax.records.spec import DataRef

  data = DataRef(
    name=ds.name,
    split=getattr(ds, "split", split),
    size=len(ds),
    input_shape=tuple(int(d) for d in ds.input_shape),
    num_classes=int(ds.num_classes),
    start=rows.start,
    stop=rows.stop,
    skip=rows.skip,
    file_sha256=loading.file_sha256(ds.name),
  )
  if not data.indices():
    raise RunError(
      f"rows select no input: {ds.name} {data.split} has {len(ds)} inputs, "
      f"start={rows.start} stop={rows.stop}",
      "rows",
    )
  return loading.bind_images(data, ds)


def _open(model_dir, torch, dataset, split, data_dir, sigma, sigma_source, pack, resize, denoiser):
  """``(loaded, sigma, sigma_source)`` of a model directory or checkpoint, as a run certifies
  it (:func:`prepare`, :func:`load`)."""
  net, config, ds = _load_model(model_dir, torch, dataset, split, data_dir, resize)
  sigma, sigma_source = _sigma(sigma, sigma_source, config, model_dir or torch.path)
  net = _packed(net, pack)
  apply_fn, params, denoiser_config = _apply(net, denoiser, sigma, resize)
  return Loaded(net, config, ds, apply_fn, params, model_dir, denoiser_config), sigma, sigma_source


def _sigma(sigma, source: str, config: dict, where) -> tuple[float, str]:
  """``(sigma, source)``: as given, else the model's training sigma (``"model"``), > 0."""
  if sigma is not None:
    return sigma, source
  if "sigma" not in config:
    raise RunError("sigma is required (the model does not record its training sigma)", "sigma")
  sigma = float(config["sigma"])
  if config.get("input_encoding") == "ablation":  # rsjax.ablation: no noise is drawn
    raise RunError(
      f"sigma is required: the model in {where!r} takes ablated images (--method patch or "
      "ablation draw no noise): give any sigma > 0, which the run records and does not use",
      "sigma",
    )
  if not sigma > 0:
    raise RunError(
      f"sigma is required: the model in {where!r} was trained without noise "
      f"(sigma {sigma:g}); give the certification noise level",
      "sigma",
    )
  return sigma, "model"


def architecture_of(config: dict, *, torch: bool) -> str | None:
  """The architecture a run names for a model of this configuration (a PyTorch
  checkpoint's ``torch_arch``, else the configuration's ``model``)."""
  return config.get("torch_arch" if torch else "model") or config.get("model")


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
  was: ``run.sampling.pack``), the denoiser
  from ``denoiser`` (default: the recorded directory), the run's dataset split."""
  ref = run.model
  torch = torch_checkpoint and TorchCheckpoint(torch_checkpoint, ref.torch_arch, ref.normalize)
  denoiser = denoiser or ref.denoiser
  data = run.data  # a run's dataset name is never empty (RunSpec refuses it)
  where = (model_dir, torch or None, data.name, data.split, data_dir)
  return _open(*where, run.sigma, "", run.sampling.pack, ref.resize, denoiser)[0]


def plan(
  run: RunSpec,
  loaded: Loaded,
  *,
  batch_size: int | str = 1000,
  data_dir: str | None = None,
  files: Mapping[str, str | None] | None = None,
) -> tuple[Context, Certifier]:
  """The context of ``run`` over what it loaded, and its method's certifier
  (``rsjax.methods``: ``Method.build``); the files its options name are resolved against
  the result file's folder, or are where ``files`` says a reader moved them
  (``rsjax.records.paths.locator``)."""
  from rsjax import methods
  from rsjax.records import paths
  from rsjax.runs.method import Context

  files = {k: v for k, v in (files or {}).items() if v is not None}

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
      files=files,
    )
    method = methods.get(run.method)
    options = method.located(run.options, paths.locator(run.out, files))
    options = {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}
    return ctx, method.build(ctx, **options)
  except ValueError as e:
    raise RunError(str(e), "method") from None
