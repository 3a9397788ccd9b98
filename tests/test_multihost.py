"""Multi-process certification through jax.distributed equals a single-process run.

Two CPU processes on this machine join a loopback coordinator, each certifies
its share of the dataset ids with ``rsjax.certify`` and writes its own rows
file; process 0 merges them. The merged counts and certificates must equal a
single-process run exactly. This file is also the worker
(``python test_multihost.py worker ...``).
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
  cert = rsjax.certify(SEED, _apply, w, x[ids], sigma=SIGMA, num_classes=NUM_CLASSES, n0=N0,
                       n=N, alpha=0.01, batch_size=256, ids=ids)
  return cert


def _row(i, cert, k):
  counts = ",".join(str(int(c)) for c in cert.counts[k])
  counts0 = ",".join(str(int(c)) for c in cert.counts_selection[k])
  return f"{int(i)}\t{int(cert.prediction[k])}\t{float(cert.radius[k])!r}\t{counts0}\t{counts}"


HEADER = "idx\tpredict\tradius\tcounts_selection\tcounts"


def _worker(port: int, process_id: int, out: str) -> None:
  import rsjax.distributed as dist
  pid, count = dist.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=process_id,
                               initialization_timeout=60)
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
  print(json.dumps({"pid": pid, "ids": mine.tolist()}), flush=True)


def _free_port() -> int:
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _launch(tmp_path, port):
  out = str(tmp_path / "certify.tsv")
  env = dict(os.environ)
  env["JAX_PLATFORMS"] = "cpu"
  env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
  for k in ("RSJAX_COORDINATOR_ADDRESS", "RSJAX_NUM_PROCESSES", "RSJAX_PROCESS_ID"):
    env.pop(k, None)
  procs = [
      subprocess.Popen([sys.executable, __file__, "worker", str(port), str(i), out],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
      for i in range(2)
  ]
  deadline = time.monotonic() + 120
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


def test_two_processes_match_single_process(tmp_path):
  for attempt in range(2):  # a free port can be taken between choosing and binding it
    out, results = _launch(tmp_path, _free_port())
    if all(rc == 0 for rc, _, _ in results):
      break
  for rc, stdout, stderr in results:
    assert rc == 0, f"worker failed (rc={rc}):\n{stdout}\n{stderr[-3000:]}"
  shares = [json.loads(stdout.strip().splitlines()[-1]) for _, stdout, _ in results]
  assert sorted(i for s in shares for i in s["ids"]) == list(range(NUM_INPUTS))
  assert all(s["ids"] for s in shares)  # both processes did work

  with open(out, encoding="utf-8") as f:
    merged = f.read().splitlines()
  ids = np.arange(NUM_INPUTS)
  single = _certify(ids)
  expected = [HEADER] + [_row(i, single, k) for k, i in enumerate(ids)]
  assert merged == expected
  # Not a vacuous comparison: the noise made the counts non-degenerate.
  assert (single.counts > 0).sum() > NUM_INPUTS


def test_split_indices_partitions():
  import rsjax.distributed as dist
  idx = np.arange(10) * 3
  parts = [dist.split_indices(idx, process_index=p, process_count=3) for p in range(3)]
  assert sorted(np.concatenate(parts).tolist()) == idx.tolist()
  assert [len(p) for p in parts] == [4, 3, 3]
  with pytest.raises(ValueError, match="process_index"):
    dist.split_indices(idx, process_index=3, process_count=3)


def test_merge_rows_sorts_dedups_and_rejects_conflicts(tmp_path):
  import rsjax.distributed as dist
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


def test_initialize_single_process_and_bad_arguments(monkeypatch):
  import rsjax.distributed as dist
  for k in ("RSJAX_COORDINATOR_ADDRESS", "RSJAX_NUM_PROCESSES", "RSJAX_PROCESS_ID"):
    monkeypatch.delenv(k, raising=False)
  assert dist.initialize() == (0, 1)
  assert dist.initialize(num_processes=1) == (0, 1)
  with pytest.raises(ValueError, match="process_id"):
    dist.initialize("127.0.0.1:1234", num_processes=2, process_id=2)
  with pytest.raises(ValueError, match="coordinator_address"):
    dist.initialize("localhost", num_processes=2, process_id=0)
  monkeypatch.setenv("RSJAX_NUM_PROCESSES", "two")
  with pytest.raises(ValueError, match="RSJAX_NUM_PROCESSES"):
    dist.initialize()


if __name__ == "__main__":
  if len(sys.argv) == 5 and sys.argv[1] == "worker":
    _worker(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
  else:
    sys.exit("usage: test_multihost.py worker PORT PROCESS_ID OUT")
