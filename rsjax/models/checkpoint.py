"""Step checkpoints of pytrees with orbax (one small wrapper).

A checkpoint directory holds one sub-directory per step (for training: per
finished epoch). Each step stores named pytree items (``StandardSave``) and one
JSON item ``meta``. Saves are synchronous and atomic (orbax writes to a
temporary directory and renames it when complete; left-over temporary
directories of a killed run are removed when the directory is opened again),
so the latest step is always a complete checkpoint.

Typed PRNG keys (``jax.random.key``) are stored as their key data and rebuilt
with the implementation of the corresponding leaf of the restore target.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp

__all__ = ["Checkpoints"]

_META = "meta"


def _is_key(x) -> bool:
  return isinstance(x, (jax.Array, jax.ShapeDtypeStruct)) and jnp.issubdtype(
    x.dtype, jax.dtypes.prng_key
  )


def _keys_to_data(tree):
  return jax.tree.map(lambda a: jax.random.key_data(a) if _is_key(a) else a, tree)


def _abstract(tree):
  return jax.tree.map(ocp.utils.to_shape_dtype_struct, _keys_to_data(tree))


def _data_to_keys(restored, target):
  return jax.tree.map(
    lambda r, t: jax.random.wrap_key_data(r, impl=jax.random.key_impl(t)) if _is_key(t) else r,
    restored,
    target,
  )


class CheckpointReadError(ValueError):
  """A checkpoint's files cannot be read (damaged, truncated or partly deleted)."""

  def __init__(self, directory: str, step: int):
    super().__init__(
      f"the checkpoint of step {step} in {directory!r} cannot be read: a file in it "
      "is damaged or missing (train again, or restore it from a copy; --debug or "
      "the exception's __cause__ shows the storage error)"
    )
    self.directory, self.step = directory, step


class Checkpoints:
  """A directory of step checkpoints (``orbax.checkpoint.CheckpointManager``).

  Example::

    ckpt = Checkpoints(workdir + "/checkpoints")
    ckpt.save(3, items={"model": state}, meta={"epoch": 3})
    items, meta = ckpt.restore(targets={"model": state})   # latest step
  """

  def __init__(self, directory, *, max_to_keep: int | None = 2):
    """Opens (creating if needed) a checkpoint directory.

    Args:
      directory: the directory; created when missing.
      max_to_keep: number of most recent steps kept (None keeps all).
    """
    if max_to_keep is not None and int(max_to_keep) < 1:
      raise ValueError(f"max_to_keep must be >= 1 or None, got {max_to_keep!r}")
    self.directory = os.path.abspath(os.fspath(directory))
    options = ocp.CheckpointManagerOptions(
      max_to_keep=max_to_keep,
      enable_async_checkpointing=False,
      create=True,
      cleanup_tmp_directories=True,
    )
    self._mngr = ocp.CheckpointManager(self.directory, options=options)

  def latest_step(self) -> int | None:
    """The latest complete step, or None when there is none."""
    return self._mngr.latest_step()

  def all_steps(self) -> list[int]:
    return sorted(self._mngr.all_steps())

  def save(self, step: int, *, items: Mapping, meta: Mapping | None = None) -> None:
    """Saves pytrees and JSON metadata as ``step`` (blocks until written).

    Args:
      step: a non-negative int, larger than the steps already saved.
      items: name -> pytree of arrays (typed PRNG keys allowed).
      meta: a JSON-serializable dict.
    """
    if _META in items:
      raise ValueError(f"item name {_META!r} is reserved for the JSON metadata")
    args = {name: ocp.args.StandardSave(_keys_to_data(tree)) for name, tree in items.items()}
    args[_META] = ocp.args.JsonSave(dict(meta or {}))
    self._mngr.save(int(step), args=ocp.args.Composite(**args), force=True)
    self._mngr.wait_until_finished()

  def restore(self, step: int | None = None, *, targets: Mapping) -> tuple[dict, dict]:
    """Restores some items and the metadata of a step.

    Args:
      step: the step; None for the latest.
      targets: name -> a pytree with the structure, shapes and dtypes of the
        saved item (e.g. a freshly initialized state); only these items are
        read. Typed keys in a target are restored as typed keys.

    Returns:
      ``(items, meta)``: name -> restored pytree (same structure as its
      target), and the JSON metadata dict.

    Raises:
      FileNotFoundError: there is no checkpoint (or no such step).
      CheckpointReadError: the step's files are damaged or incomplete (the
        storage library's error is chained as its cause).
    """
    if step is None:
      step = self.latest_step()
      if step is None:
        raise FileNotFoundError(f"no checkpoint in {self.directory!r}")
    elif int(step) not in self._mngr.all_steps():
      raise FileNotFoundError(f"no checkpoint of step {step} in {self.directory!r}")
    args = {name: ocp.args.StandardRestore(_abstract(t)) for name, t in targets.items()}
    args[_META] = ocp.args.JsonRestore()
    try:
      out = self._mngr.restore(int(step), args=ocp.args.Composite(**args))
    except ValueError as e:
      if "tree structures do not match" in str(e):
        raise  # another architecture: the caller says which
      raise CheckpointReadError(self.directory, step) from e
    except Exception as e:  # noqa: BLE001 -- TensorStore / orbax errors of a damaged file
      raise CheckpointReadError(self.directory, step) from e
    items = {name: _data_to_keys(out[name], t) for name, t in targets.items()}
    return items, dict(out[_META])

  def close(self) -> None:
    self._mngr.close()

  def __enter__(self) -> Checkpoints:
    return self

  def __exit__(self, *exc) -> None:
    self.close()
