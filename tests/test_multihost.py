"""Multi-process certification through jax.distributed equals a single-process run.

Two CPU processes on this machine join a loopback coordinator, each certifies
its share of the dataset ids with ``rsjax.certify`` and writes its own rows
file; process 0 merges them. The merged counts and certificates must equal a
single-process run exactly. The processes join through an explicit coordinator,
or with no argument from a simulated SLURM step or Open MPI job (the variables
``srun`` and ``mpirun`` set, which JAX's cluster detection reads). This file is
also the worker (``python test_multihost.py worker ...``).
"""

import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

NUM_INPUTS = 7
DIM = 6
NUM_CLASSES = 3
N0, N = 50, 2000
SIGMA = 0.5
SEED = 11


def _problem():
  """A linear 3-class problem: weights and inputs (NumPy, fixed)."""
  rs = np.random.RandomState(0)
  w = rs.normal(size=(DIM, NUM_CLASSES)).astype(np.float32)
  x = rs.normal(size=(NUM_INPUTS, DIM)).astype(np.float32) * 0.5
  return w, x


def _apply(w, x):
  return x @ w


def _certify(ids):
  import rsjax

  w, x = _problem()
  cert = rsjax.certify(
    SEED,
    _apply,
    w,
    x[ids],
    sigma=SIGMA,
    num_classes=NUM_CLASSES,
    n0=N0,
    n=N,
    alpha=0.01,
    batch_size=256,
    ids=ids,
  )
  return cert


def _row(i, cert, k):
  counts = ",".join(str(int(c)) for c in cert.counts[k])
  counts0 = ",".join(str(int(c)) for c in cert.counts_selection[k])
  return f"{int(i)}\t{int(cert.prediction[k])}\t{float(cert.radius[k])!r}\t{counts0}\t{counts}"


HEADER = "idx\tpredict\tradius\tcounts_selection\tcounts"


def _worker(how: str, port: int, process_id: int, out: str) -> None:
  import rsjax.runs.distributed as dist

  if how == "coordinator":
    pid, count = dist.initialize(
      f"127.0.0.1:{port}", num_processes=2, process_id=process_id, initialization_timeout=600
    )
  else:  # the cluster's variables only
    pid, count = dist.initialize(initialization_timeout=600)
  assert (pid, count) == (process_id, 2)
  mine = dist.split_indices(np.arange(NUM_INPUTS))
  cert = _certify(mine)
  path = dist.process_path(out)
  with open(path, "w", encoding="utf-8") as f:
    f.write(HEADER + "\n")
    for k, i in enumerate(mine):
      f.write(_row(i, cert, k) + "\n")
  dist.barrier("rows-written")
  if pid == 0:
    dist.merge_rows([dist.process_path(out, process_index=p) for p in range(count)], out)
  dist.barrier("merged")
  print(json.dumps({"pid": pid, "ids": mine.tolist(), "joined": dist.joined()}), flush=True)


def _free_port(low: int = 0) -> int:
  """A port free on the loopback now: any (``low`` 0), else one in ``[low, 65535]``."""
  rng = np.random.default_rng()
  for _ in range(200):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
      try:
        s.bind(("127.0.0.1", 0 if low == 0 else int(rng.integers(low, 65536))))
      except OSError:
        continue
      return s.getsockname()[1]
  raise RuntimeError(f"no free port in [{low}, 65535]")


#: JAX's SLURM and Open MPI detection put the coordinator on a port of this range, chosen by
#: the job id (jax._src.clusters: ``job_id % 2**12 + 65535 - 2**12 + 1``).
CLUSTER_PORTS = 65536 - 2**12


def cluster_env(how: str, port: int, process_id: int) -> dict[str, str]:
  """The variables ``srun`` (``how="slurm"``) or ``mpirun`` (``"ompi"``) give process
  ``process_id`` of a 2-process job on this machine whose coordinator JAX puts on ``port``."""
  job = port - CLUSTER_PORTS + 3 * 2**12  # a job id that JAX maps to this port
  if how == "slurm":
    return {
      "SLURM_JOB_ID": str(job),
      "SLURM_STEP_NODELIST": "localhost",
      "SLURM_NTASKS": "2",
      "SLURM_PROCID": str(process_id),
      "SLURM_LOCALID": str(process_id),
      "SLURM_STEP_NUM_NODES": "1",
      "SLURM_NNODES": "1",
    }
  if how == "ompi":  # Open MPI 4 (ORTE): the job id is a multiple of 2**12
    return {
      "OMPI_MCA_orte_hnp_uri": f"{job * 2**12}.0;tcp://127.0.0.1:41000",
      "OMPI_COMM_WORLD_SIZE": "2",
      "OMPI_COMM_WORLD_RANK": str(process_id),
      "OMPI_COMM_WORLD_LOCAL_RANK": str(process_id),
    }
  raise ValueError(how)


#: The variables of this test's own launcher, removed from the workers' environment.
LAUNCH_VARS = (
  "RSJAX_COORDINATOR_ADDRESS",
  "RSJAX_NUM_PROCESSES",
  "RSJAX_PROCESS_ID",
  "JAX_COORDINATOR_ADDRESS",
  "JAX_COORDINATOR_PORT",
)


def _launch(tmp_path, how, port):
  out = str(tmp_path / "certify.tsv")
  env = dict(os.environ)
  env["JAX_PLATFORMS"] = "cpu"
  env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
  for k in LAUNCH_VARS:
    env.pop(k, None)
  procs = [
    subprocess.Popen(
      [sys.executable, __file__, "worker", how, str(port), str(i), out],
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
      env=env if how == "coordinator" else {**env, **cluster_env(how, port, i)},
    )
    for i in range(2)
  ]
  deadline = time.monotonic() + 1800
  results = []
  for p in procs:
    try:
      stdout, stderr = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
      for q in procs:
        q.kill()
      for q in procs:
        q.communicate()
      pytest.fail("multi-process certification timed out")
    results.append((p.returncode, stdout, stderr))
  return out, results


@pytest.mark.parametrize("how", ["coordinator", "slurm", "ompi"])
def test_two_processes_match_single_process(tmp_path, how):
  for _ in range(2):  # a free port can be taken between choosing and binding it
    out, results = _launch(tmp_path, how, _free_port(0 if how == "coordinator" else CLUSTER_PORTS))
    if all(rc == 0 for rc, _, _ in results):
      break
  for rc, stdout, stderr in results:
    assert rc == 0, f"worker failed (rc={rc}):\n{stdout}\n{stderr[-3000:]}"
  shares = [json.loads(stdout.strip().splitlines()[-1]) for _, stdout, _ in results]
  assert sorted(i for s in shares for i in s["ids"]) == list(range(NUM_INPUTS))
  assert all(s["ids"] for s in shares)  # both processes did work
  through = {
    "coordinator": "the coordinator given",
    "slurm": "the SLURM job",
    "ompi": "the Open MPI job",
  }[how]
  for p, s in enumerate(shares):
    assert s["joined"].startswith(f"process {p} of 2 ") and through in s["joined"], s["joined"]
    assert s["joined"].endswith("processes 0, 1 hold 4 devices"), s["joined"]

  with open(out, encoding="utf-8") as f:
    merged = f.read().splitlines()
  ids = np.arange(NUM_INPUTS)
  single = _certify(ids)
  expected = [HEADER] + [_row(i, single, k) for k, i in enumerate(ids)]
  assert merged == expected
  # Not a vacuous comparison: the noise made the counts non-degenerate.
  assert (single.counts > 0).sum() > NUM_INPUTS


def test_split_indices_partitions():
  import rsjax.runs.distributed as dist

  idx = np.arange(10) * 3
  parts = [dist.split_indices(idx, process_index=p, process_count=3) for p in range(3)]
  assert sorted(np.concatenate(parts).tolist()) == idx.tolist()
  assert [len(p) for p in parts] == [4, 3, 3]
  with pytest.raises(ValueError, match="process_index"):
    dist.split_indices(idx, process_index=3, process_count=3)


def test_merge_rows_sorts_dedups_and_rejects_conflicts(tmp_path):
  import rsjax.runs.distributed as dist

  a, b = tmp_path / "a", tmp_path / "b"
  a.write_text("idx\tv\n3\tx\n0\ty\n")
  b.write_text("idx\tv\n1\tz\n3\tx\n")
  lines = dist.merge_rows([a, b], tmp_path / "m")
  assert lines == ["idx\tv", "0\ty", "1\tz", "3\tx"]
  assert (tmp_path / "m").read_text().splitlines() == lines
  b.write_text("idx\tv\n3\tdifferent\n")
  with pytest.raises(ValueError, match="conflicting"):
    dist.merge_rows([a, b])
  b.write_text("id\tv\n")
  with pytest.raises(ValueError, match="header"):
    dist.merge_rows([a, b])


def _no_job(monkeypatch):
  for k in (
    LAUNCH_VARS + tuple(cluster_env("slurm", 61440, 0)) + tuple(cluster_env("ompi", 61440, 0))
  ):
    monkeypatch.delenv(k, raising=False)


def test_initialize_single_process_and_bad_arguments(monkeypatch):
  import rsjax.runs.distributed as dist

  _no_job(monkeypatch)
  assert dist.detect_cluster() is None
  assert dist.initialize() == (0, 1)
  assert dist.initialize(num_processes=1) == (0, 1)
  with pytest.raises(ValueError, match="process_id"):
    dist.initialize("127.0.0.1:1234", num_processes=2, process_id=2)
  with pytest.raises(ValueError, match="coordinator_address"):
    dist.initialize("localhost", num_processes=2, process_id=0)
  monkeypatch.setenv("RSJAX_NUM_PROCESSES", "two")
  with pytest.raises(ValueError, match="RSJAX_NUM_PROCESSES"):
    dist.initialize()


@pytest.mark.parametrize("jax_detection", [True, False])
def test_detect_cluster_reads_the_jobs_jax_detects(monkeypatch, jax_detection):
  import rsjax.runs.distributed as dist

  _no_job(monkeypatch)
  # JAX's own detection is reachable in this JAX (else rsjax falls back on its own list).
  assert dist._jax_cluster_kinds() is not None
  if not jax_detection:
    monkeypatch.setattr(dist, "_jax_cluster_kinds", lambda: None)
  for how, name in (("slurm", "SLURM"), ("ompi", "Open MPI")):
    for k, v in cluster_env(how, 61440, 1).items():
      monkeypatch.setenv(k, v)
    assert dist.detect_cluster() == dist.Cluster(name, 2)
    _no_job(monkeypatch)
  # A SLURM step of one task, or one process asked for inside a job: one process, no join.
  for k, v in cluster_env("slurm", 61440, 0).items():
    monkeypatch.setenv(k, v)
  monkeypatch.setenv("SLURM_NTASKS", "1")
  assert dist.detect_cluster() == dist.Cluster("SLURM", 1)
  assert dist.initialize() == (0, 1)
  monkeypatch.setenv("SLURM_NTASKS", "2")
  assert dist.initialize(num_processes=1) == (0, 1)
  assert dist.initialize(detect=False) == (0, 1)
  monkeypatch.setenv("RSJAX_NUM_PROCESSES", "1")
  assert dist.initialize() == (0, 1)
  import jax

  assert not jax.distributed.is_initialized()


if __name__ == "__main__":
  if len(sys.argv) == 6 and sys.argv[1] == "worker":
    _worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
  else:
    sys.exit("usage: test_multihost.py worker coordinator|slurm|ompi PORT PROCESS_ID OUT")
