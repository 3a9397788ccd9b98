"""Certifying a dataset with several processes (hosts) through ``jax.distributed``.

Randomized smoothing needs no communication between inputs, so a multi-host run
is many independent single-host runs: each process certifies its own share of
the dataset ids on its local devices and writes its own rows file; one process
merges the files at the end. Because the noise of an input depends only on the
key and the input's dataset id (see ``rsjax.sample_counts``), the merged
results are identical to a single-process run.

Typical use (one call per process, e.g. in ``rsjax certify``)::

  pid, count = rsjax.runs.distributed.initialize("10.0.0.1:1234", num_processes=2, process_id=i)
  mine = rsjax.runs.distributed.split_indices(all_ids)            # this process' share
  cert = rsjax.certify(key, apply_fn, params, x[mine], ids=mine, ...)
  ... write rows to rsjax.runs.distributed.process_path("certify.tsv") ...
  rsjax.runs.distributed.barrier("rows-written")
  if pid == 0:
    rsjax.runs.distributed.merge_rows(
        [rsjax.runs.distributed.process_path("certify.tsv", process_index=p) for p in range(count)],
        "certify.tsv")

The arguments of ``initialize`` may also come from the environment:
``RSJAX_COORDINATOR_ADDRESS``, ``RSJAX_NUM_PROCESSES`` and ``RSJAX_PROCESS_ID``. Given none,
``initialize()`` joins the job the way ``jax.distributed.initialize()`` detects it by itself:
a Cloud TPU pod slice, a SLURM step (``srun``), Open MPI (``mpirun``) or Kubernetes (with the
``kubernetes`` package), and stays one process anywhere else. ``num_processes=1`` (or
``RSJAX_NUM_PROCESSES=1``) keeps one process inside such a job.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Sequence

import jax
import numpy as np
import numpy.typing as npt

from rsjax.records.io import atomic_write_text
from rsjax.util import check_int

__all__ = [
  "Cluster",
  "detect_cluster",
  "initialize",
  "joined",
  "split_indices",
  "process_path",
  "merge_rows",
  "barrier",
]

ENV_COORDINATOR = "RSJAX_COORDINATOR_ADDRESS"
ENV_NUM_PROCESSES = "RSJAX_NUM_PROCESSES"
ENV_PROCESS_ID = "RSJAX_PROCESS_ID"


def _env_int(name: str) -> int | None:
  value = os.environ.get(name)
  if value is None or value == "":
    return None
  try:
    return int(value)
  except ValueError:
    raise ValueError(f"environment variable {name} must be an integer, got {value!r}") from None


#: JAX's names of the environments it detects, as a person says them.
_CLUSTER_NAMES = {
  "slurm": "SLURM",
  "ompi": "Open MPI",
  "gcetpu": "Cloud TPU",
  "gketpu": "Cloud TPU (GKE)",
  "tpu": "Cloud TPU",
  "k8s": "Kubernetes",
  "K8sCluster": "Kubernetes",
  "mpi4py": "MPI (mpi4py)",
}

#: Used only where JAX's own detection cannot be reached (a JAX that moved it): the variables
#: that tell each job apart, and the one holding its process count.
_FALLBACK_ENVS = (
  (
    "SLURM",
    ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID"),
    "SLURM_NTASKS",
  ),
  ("Open MPI", ("OMPI_MCA_orte_hnp_uri",), "OMPI_COMM_WORLD_SIZE"),
  ("Cloud TPU (GKE)", ("TPU_WORKER_HOSTNAMES",), None),
)

#: How this process joined its run (``initialize``), for ``joined``.
_how: dict = {}


@dataclasses.dataclass(frozen=True)
class Cluster:
  """A multi-process job this process runs in, as JAX detects it.

  Attributes:
    name: the kind of job in words ("SLURM", "Open MPI", "Cloud TPU", "Kubernetes").
    process_count: its number of processes (None where only joining tells).
  """

  name: str
  process_count: int | None


def _jax_cluster_kinds():
  """JAX's cluster environments in the order it tries them, or None if it moved them."""
  try:
    from jax._src import clusters

    kinds = list(clusters.ClusterEnv._cluster_types)  # noqa: SLF001 -- JAX's own detection
  except (ImportError, AttributeError):
    return None
  return [k for k in kinds if not getattr(k, "opt_in_only_method", False)] or None


def detect_cluster() -> Cluster | None:
  """The multi-process job that ``jax.distributed.initialize()`` would join by itself.

  JAX's own detection, in its order: Cloud TPU pod slices (GCE and GKE), SLURM (inside
  ``srun``: ``SLURM_JOB_ID``, ``SLURM_STEP_NODELIST``, ``SLURM_NTASKS``, ``SLURM_PROCID``,
  ``SLURM_LOCALID``), Open MPI (``mpirun``) and Kubernetes (with the ``kubernetes``
  package); opt-in methods (mpi4py) are not tried, as in JAX.

  Returns:
    The job, or None outside any.
  """
  kinds = _jax_cluster_kinds()
  if kinds is None:
    for name, needed, count in _FALLBACK_ENVS:
      if all(v in os.environ for v in needed):
        return Cluster(name, _env_int(count) if count else None)
    return None
  for kind in kinds:
    if kind.is_env_present():
      name = getattr(kind, "name", "") or kind.__name__
      return Cluster(_CLUSTER_NAMES.get(name, name), int(kind.get_process_count()))
  return None


def initialize(
  coordinator_address: str | None = None,
  num_processes: int | None = None,
  process_id: int | None = None,
  *,
  local_device_ids: int | Sequence[int] | None = None,
  initialization_timeout: int = 300,
  detect: bool = True,
) -> tuple[int, int]:
  """Joins a multi-process run (``jax.distributed.initialize``); a no-op for one process.

  Must be called before any other JAX call of the process. With no argument and no
  ``RSJAX_*`` variable it joins the job JAX detects (``detect_cluster``: a Cloud TPU pod
  slice, SLURM, Open MPI, Kubernetes) as ``jax.distributed.initialize()`` does with no
  argument, and stays one process outside any; an explicit coordinator serves every other
  setting.

  Args:
    coordinator_address: ``"host:port"`` of process 0's coordinator service
      (default: ``$RSJAX_COORDINATOR_ADDRESS``).
    num_processes: number of processes (default: ``$RSJAX_NUM_PROCESSES``); 1 stays one
      process, even inside a detected job.
    process_id: this process' id in ``[0, num_processes)`` (default:
      ``$RSJAX_PROCESS_ID``).
    local_device_ids: restricts the devices this process uses (passed on).
    initialization_timeout: seconds to wait for all processes to connect.
    detect: join a detected job when nothing is given (False: one process then).

  Returns:
    ``(process_index, process_count)``. ``(0, 1)`` without initializing when
    ``num_processes`` is 1, or nothing is given and no job of several processes is detected.

  Raises:
    ValueError: for a missing or malformed ``coordinator_address``, a bad
      ``num_processes`` or a ``process_id`` outside ``[0, num_processes)``.
  """
  if coordinator_address is None:
    coordinator_address = os.environ.get(ENV_COORDINATOR) or None
  num_processes = _env_int(ENV_NUM_PROCESSES) if num_processes is None else num_processes
  process_id = _env_int(ENV_PROCESS_ID) if process_id is None else process_id
  if coordinator_address is None and num_processes is None and process_id is None:
    return _join_detected(local_device_ids, initialization_timeout) if detect else (0, 1)
  num_processes = check_int("num_processes", num_processes)
  if num_processes == 1 and process_id in (None, 0):
    return 0, 1
  process_id = _index("process_id", process_id, num_processes)
  address = coordinator_address if isinstance(coordinator_address, str) else ""
  host, _, port = address.rpartition(":")
  if not host or not port.isdigit() or not 0 < int(port) < 65536:
    raise ValueError(f"coordinator_address must be 'host:port', got {coordinator_address!r}")
  if not jax.distributed.is_initialized():
    jax.distributed.initialize(
      coordinator_address=coordinator_address,
      num_processes=num_processes,
      process_id=process_id,
      local_device_ids=local_device_ids,
      initialization_timeout=int(initialization_timeout),
    )
    _how.update(how="the coordinator given", coordinator=coordinator_address)
  elif (jax.process_count(), jax.process_index()) != (num_processes, process_id):
    raise ValueError(
      f"jax.distributed is already initialized as process {jax.process_index()} of "
      f"{jax.process_count()}, not {process_id} of {num_processes}"
    )
  return jax.process_index(), jax.process_count()


def _index(name: str, value: object, count: int) -> int:
  """``value`` if it is an integer in ``[0, count)``; else a ValueError naming ``name``."""
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < count:
    raise ValueError(f"{name} must be an integer in [0, {count}), got {value!r}")
  return int(value)


def _join_detected(local_device_ids, initialization_timeout) -> tuple[int, int]:
  """``initialize`` with nothing given: the job JAX detects, else one process."""
  if jax.distributed.is_initialized():
    return jax.process_index(), jax.process_count()
  cluster = detect_cluster()
  if cluster is None or cluster.process_count == 1:
    return 0, 1
  jax.distributed.initialize(
    local_device_ids=local_device_ids, initialization_timeout=int(initialization_timeout)
  )
  try:
    from jax._src.distributed import global_state

    coordinator = global_state.coordinator_address
  except (ImportError, AttributeError):
    coordinator = None
  _how.update(how=f"the {cluster.name} job", coordinator=coordinator)
  return jax.process_index(), jax.process_count()


def joined() -> str:
  """One line on the run this process joined: which process, how, and every process seen.

  For example ``process 1 of 2 (host node7) joined through the SLURM job (coordinator
  node1:62012); processes 0, 1 hold 4 devices``; ``one process`` when it joined none.
  """
  count = jax.process_count()
  if count == 1:
    return f"one process (host {socket.gethostname()})"
  how = _how.get("how", "jax.distributed")
  coordinator = f" (coordinator {_how['coordinator']})" if _how.get("coordinator") else ""
  devices = jax.devices()
  seen = sorted({d.process_index for d in devices})
  return (
    f"process {jax.process_index()} of {count} (host {socket.gethostname()}) joined through "
    f"{how}{coordinator}; processes {', '.join(map(str, seen))} hold {len(devices)} devices"
  )


def split_indices(
  indices: npt.ArrayLike, *, process_index: int | None = None, process_count: int | None = None
) -> np.ndarray:
  """This process' share of a list of dataset indices: ``indices[p::count]``.

  The split is strided, so every process gets inputs from the whole list (the
  cost per input is similar everywhere), each index goes to exactly one
  process, and the order inside a share follows ``indices``.

  Args:
    indices: ``[M]`` integer dataset indices.
    process_index: ``p`` (default ``jax.process_index()``).
    process_count: number of processes (default ``jax.process_count()``).

  Returns:
    ``[ceil((M - p) / count)]`` int64 array.
  """
  arr = np.asarray(indices)
  if arr.ndim != 1:
    raise ValueError(f"indices must be one-dimensional, got shape {arr.shape}")
  if arr.size and not np.issubdtype(arr.dtype, np.integer):
    raise ValueError(f"indices must be integers, got dtype {arr.dtype}")
  count = jax.process_count() if process_count is None else process_count
  index = jax.process_index() if process_index is None else process_index
  count = check_int("process_count", count)
  return arr[_index("process_index", index, count) :: int(count)].astype(np.int64)


def process_path(
  path: str | os.PathLike,
  *,
  process_index: int | None = None,
  process_count: int | None = None,
) -> str:
  """The rows file of one process: ``path.part-00001-of-00002``.

  Args:
    path: the final (merged) results path.
    process_index: default ``jax.process_index()``.
    process_count: default ``jax.process_count()``.
  """
  count = jax.process_count() if process_count is None else int(process_count)
  index = jax.process_index() if process_index is None else int(process_index)
  if count < 1 or not 0 <= index < count:
    raise ValueError(f"process_index must lie in [0, {count}), got {index}")
  return f"{os.fspath(path)}.part-{index:05d}-of-{count:05d}"


def merge_rows(
  paths: Sequence[str | os.PathLike], out_path: str | os.PathLike | None = None
) -> list[str]:
  """Merges per-process tab-separated rows files (one header line each), sorted by idx.

  The first column of every row is the integer dataset index. Rows repeated
  verbatim (e.g. after a resumed run) are kept once; two different rows for the
  same index are an error.

  Args:
    paths: the rows files, all with the same header.
    out_path: where to write the merged file (atomically); ``None`` writes nothing.

  Returns:
    The merged lines, header first (no trailing newlines).

  Raises:
    ValueError: for no paths, different headers, a non-integer idx or
      conflicting rows for one idx.
  """
  paths = list(paths)
  if not paths:
    raise ValueError("paths must name at least one rows file")
  header = None
  by_idx: dict[int, str] = {}
  for p in paths:
    with open(p, encoding="utf-8") as f:
      h, *rows = f.read().splitlines() or [None]
    if h is None:
      raise ValueError(f"rows file {os.fspath(p)!r} is empty (no header)")
    if header is None:
      header = h
    elif h != header:
      raise ValueError(f"rows file {os.fspath(p)!r} has header {h!r}, expected {header!r}")
    for row in filter(str.strip, rows):
      first = row.split("\t", 1)[0]
      try:
        idx = int(first)
      except ValueError:
        raise ValueError(f"rows file {os.fspath(p)!r}: idx {first!r} is not an integer") from None
      if idx in by_idx and by_idx[idx] != row:
        raise ValueError(f"conflicting rows for idx {idx}: {by_idx[idx]!r} and {row!r}")
      by_idx[idx] = row
  lines = [header] + [by_idx[i] for i in sorted(by_idx)]
  if out_path is not None:
    atomic_write_text(out_path, "\n".join(lines) + "\n")
  return lines


def barrier(name: str) -> None:
  """Waits until every process reaches the barrier ``name`` (no-op for one process).

  Uses a cross-process collective (``multihost_utils.sync_global_devices``);
  on CPU this needs JAX's CPU collectives (``jax_cpu_collectives_implementation``,
  ``"gloo"`` by default).
  """
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils

    multihost_utils.sync_global_devices(name)
