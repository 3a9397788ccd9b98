"""Incremental randomized smoothing the paper's way (Ugare et al., ICLR 2024; issue 73).

For each sigma in {1.0, 0.25, 0.5}: the demo's LeNet on ``mnist5k`` (``benchmarks.measure.
demo_model``, 20 epochs) is the parent, certified once (``rsjax certify``, N0 100, N 20,000,
alpha 0.001); its children are the same model run in bfloat16 (``bf16``) and its weight-only
int8 quantization (``int8``). Each child is certified on every ``skip``-th test digit

* incrementally at each ``n_p`` of ``recert_n``: ``rsjax recertify`` with ``--N n_p``, alpha_2
  0.001 and the gamma switch at 0.99, each row at total alpha 0.002, once on fresh noise (rows
  whose parent p_A_lower >= 0.99 from scratch with N0 100 + N ``n_p`` at 0.002) and once with
  ``--replay`` (the child on the parent's own samples against its stored votes; rows whose
  parent selection share >= 0.99 from scratch);
* from scratch at each ``n_p`` of ``scratch_n`` (the paper's baseline: the same N0, the same
  ``n_p``, the same total alpha 0.002).

Every run is checked by ``rsjax verify``. For each child and sigma the JSON holds, per
configuration, ACR, certified accuracy, seconds an image (the command's, less JAX's compiling,
the fastest of ``repeats`` runs) and forward passes an image; and the paper's measure, the time
ratio at equal ACR: the time from scratch needs (interpolated linearly between its ``n_p``) to
reach the incremental run's ACR, over the incremental run's time; where from scratch never
reaches it on the grid, the ratio is a lower bound (``at_least``).

Commands::

  python experiments/recertify_mnist.py                          # results/recertify_full.json
  python experiments/recertify_mnist.py --quick --cifar-shaped   # results/recertify_cifar_shaped_quick.json

Numbers produced (seed 0, 2026-12-07, 2-core AMD EPYC, nothing else running; about 22 minutes
for the first command, 15 for the second once its parents are trained; the tables are in
``docs/guides/recertify.md``, the runs in ``results/recertify_full/`` and
``results/recertify_cifar_shaped_quick/``): at sigma 1.0 the int8 child replayed at n_p 1,000
has ACR 1.016 against 0.964 from scratch at the same n_p and is 3.14x faster at equal ACR
(2.92x in forward passes; 1.85x at n_p 4,000); on fresh noise 1.06x. Replayed, no configuration
needs more forward passes than from scratch at equal ACR (1.00x to 2.92x); in time 0.94x to
3.14x, the configurations below 1x doing the baseline's own work (most rows switched).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments import _common  # noqa: E402

RESULTS = _common.RESULTS

N0 = 100
RADII = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0)


@dataclasses.dataclass(frozen=True)
class Config:
  """The experiment's settings (see the module docstring)."""

  sigmas: tuple
  children: tuple
  skip: int
  stop: int
  parent_n: int
  recert_n: tuple
  scratch_n: tuple
  alpha: float
  gamma: float
  batch: int
  out: str
  results: str
  repeats: int = 3
  model: str = "lenet"
  dataset: str = "mnist5k"


def get_config(quick: bool = True, cifar_shaped: bool = False) -> Config:
  """The settings of one run.

  Commands::

    nice -n 10 python experiments/recertify_mnist.py --quick   # get_config(True): 20 digits
    nice -n 10 python experiments/recertify_mnist.py           # get_config(False): 50 digits

  ``--quick`` certifies every 50th of the first 1,000 test digits; otherwise every 20th.
  ``--cifar-shaped``: the demo's ResNet-20 on ``mnist5k32`` (the digits padded to 32x32x3,
  CIFAR-10's shape, not its data) in place of LeNet on ``mnist5k``, smaller: a parent of N
  10,000, ``n_p`` 1,000 (from scratch 1,000 to 4,000), every 100th test digit
  (``--quick``; else every 50th).
  """
  name = "recertify_" + ("cifar_shaped_" if cifar_shaped else "") + ("quick" if quick else "full")
  cfg = Config(
    sigmas=(1.0, 0.25, 0.5),
    children=("int8", "bf16"),
    skip=50 if quick else 20,
    stop=1000,
    parent_n=20_000,
    recert_n=(1000, 4000),
    scratch_n=(1000, 2000, 4000, 10_000),
    alpha=0.001,
    gamma=0.99,
    batch=5000,
    out=os.path.join("build", name),
    results=os.path.join(RESULTS, name),
  )
  if cifar_shaped:  # ResNet-20 costs about 100x LeNet's pass: fewer digits and samples
    return dataclasses.replace(
      cfg, model="resnet20", dataset="mnist5k32", skip=100 if quick else 50,
      parent_n=10_000, recert_n=(1000,), scratch_n=(1000, 2000, 4000), batch=1000, repeats=1,
    )  # fmt: skip
  return cfg


def _parent_model(cfg: Config, sigma: float) -> str:
  """The directory of the sigma's parent: the demo's classifier (``benchmarks.measure``)."""
  from benchmarks.measure import demo_model

  return demo_model(sigma, model=cfg.model, shape32=cfg.dataset == "mnist5k32").directory


def _cli(*argv: object) -> str:
  """Runs ``rsjax ARGV`` in this process; returns what it printed."""
  import contextlib
  import io

  from rsjax.app import cli

  buf = io.StringIO()
  with contextlib.redirect_stdout(buf):
    code = cli.main([str(a) for a in argv])
  if code != 0:
    raise SystemExit(f"failed: rsjax {' '.join(map(str, argv))}")
  return buf.getvalue()


_SECONDS = re.compile(r"(\d+) new inputs in ([\d.]+)s \(([\d.]+)s of it compiling")


def _timed(path: str, *argv: object, repeats: int = 1) -> None:
  """``rsjax ARGV`` writing ``path``; keeps its seconds an image, compiling excluded, in
  ``path.seconds.json`` (a finished run is not run again): the fastest of ``repeats`` runs,
  the others written to a scratch file and removed (the same rows, counts and radii)."""
  side = path + ".seconds.json"
  if os.path.isfile(side):
    return
  runs = []
  for k in range(repeats):
    out = path if k == 0 else f"{path}.again.tsv"
    m = _SECONDS.search(_cli(*(out if a == path else a for a in argv)))
    if m is None or int(m.group(1)) == 0:
      raise SystemExit(f"{path}: no timing in the command's output (a resumed run?)")
    runs.append((int(m.group(1)), float(m.group(2)), float(m.group(3))))
    if k:
      for suffix in ("", ".run.json", ".cert.jsonl"):
        os.remove(out + suffix)
  written, seconds, compiling = min(runs, key=lambda r: r[1] - r[2])
  with open(side, "w") as f:
    json.dump({"seconds_per_image": (seconds - compiling) / written, "rows": written,
               "seconds": seconds, "compile_seconds": compiling, "repeats": repeats,
               "all_seconds_per_image": [(t - c) / w for w, t, c in runs]}, f)  # fmt: skip


def _child(cfg: Config, sigma: float, name: str) -> tuple[str, tuple]:
  """``(model directory, extra flags)`` of a child of the sigma's parent."""
  from rsjax import models

  parent = _parent_model(cfg, sigma)
  if name == "bf16":
    return parent, ("--precision", "bfloat16")
  d = os.path.join(cfg.out, f"{cfg.model}_{sigma:g}_int8")
  if not os.path.isfile(os.path.join(d, "config.json")):
    model, config = models.load_model(parent)
    models.save_child(d, models.quantize_int8(model), config, {"transform": "int8"})
  return d, ()


def _runs(cfg: Config, sigma: float) -> dict:
  """Certifies the sigma's parent and each child's configurations (a finished run is kept)."""
  root = os.path.join(cfg.out, f"s{sigma:g}")
  os.makedirs(root, exist_ok=True)
  rows = ("--dataset", cfg.dataset, "--sigma", sigma, "--skip", cfg.skip, "--max", cfg.stop,
          "--N0", N0, "--batch", cfg.batch, "--quiet")  # fmt: skip
  parent = os.path.join(root, "parent.tsv")
  _timed(parent, "certify", _parent_model(cfg, sigma), parent, *rows, "--N", cfg.parent_n,
         "--alpha", cfg.alpha)  # fmt: skip
  out: dict = {"parent": parent}
  _store_votes(parent, cfg.batch)
  for name in cfg.children:
    d, extra = _child(cfg, sigma, name)
    for n in cfg.recert_n:
      for how, flags in (("recertify", ()), ("replay", ("--replay",))):
        p = os.path.join(root, f"{name}_{'re' if how == 'recertify' else how}{n}.tsv")
        _timed(p, "recertify", parent, d, p, "--N", n, "--N0", N0, "--alpha", cfg.alpha,
               "--gamma", cfg.gamma, "--batch", cfg.batch, "--quiet", *extra, *flags,
               repeats=cfg.repeats)  # fmt: skip
        out[(name, how, n)] = p
    for n in cfg.scratch_n:
      p = os.path.join(root, f"{name}_scratch{n}.tsv")
      _timed(
        p, "certify", d, p, *rows, "--N", n, "--alpha", 2 * cfg.alpha, *extra, repeats=cfg.repeats
      )
      out[(name, "scratch", n)] = p
  return out


def _store_votes(parent: str, batch: int) -> None:
  """The parent's votes (``rsjax recertify --replay``'s, once per parent), their seconds in
  ``<votes>.seconds.json``: a one-off cost of the parent, not of any child."""
  import time

  from rsjax.app.parent_votes import store_votes
  from rsjax.records.spec import RunSpec

  side = parent + ".votes.npz.seconds.json"
  if os.path.isfile(side):
    return
  start = time.perf_counter()
  store_votes(RunSpec.read(parent), parent, batch=batch)
  with open(side, "w") as f:
    json.dump({"seconds": time.perf_counter() - start}, f)


def _summary(path: str, *, n: int, recertify: bool, replay: bool = False) -> dict:
  """ACR, certified accuracy, seconds and forward passes an image of a verified run."""
  from rsjax import verify
  from rsjax.records import io

  report = verify.verify(path)
  if not report.ok:
    raise SystemExit(f"{path} does not verify: {report.summary()}")
  r = io.read_certify(path)
  ok = (r.predict == r.label) & (r.predict >= 0)
  radius = np.where(ok, r.radius, 0.0)
  out = {
    "images": len(r.idx),
    "acr": float(radius.mean()),
    "accuracy": _common.certified_curve(ok, r.radius, RADII, predict=r.predict),
    # the command's seconds less its compiling, an image (the rows' own times hold the
    # compiling of their first call)
    "seconds_per_image": json.load(open(path + ".seconds.json"))["seconds_per_image"],
    "verified": True,
  }
  if recertify:
    how = np.asarray(r.extra["fallback"], int)
    switched = how == 2
    out["switched_share"] = float(switched.mean())
    # a switched row: N0 + n child passes; a bound row: n passes of each model, or of the
    # child alone when it replays the parent's samples against its stored votes
    out["forward_passes_per_image"] = float(np.mean(np.where(switched, N0 + n, (2 - replay) * n)))
    if not replay:  # the fresh-noise run's passes had a bound row cost n (a projection)
      out["forward_passes_replay_per_image"] = float(np.mean(np.where(switched, N0 + n, n)))
    zeta = np.asarray(r.extra["zeta"], float)[~switched]
    out["zeta_mean"] = float(zeta.mean()) if zeta.size else None  # None: every row switched
  else:
    out["forward_passes_per_image"] = float(N0 + n)
  return out


def ratio_at_equal_acr(acr: float, seconds: float, scratch: list[tuple[float, float]]) -> dict:
  """The seconds from scratch needs to reach ``acr`` (linear between the grid's points, sorted
  by seconds) over ``seconds``; ``at_least`` where no point of the grid reaches it."""
  pts = sorted(scratch, key=lambda p: p[1])  # (acr, seconds)
  if acr <= pts[0][0]:
    return {"ratio": pts[0][1] / seconds, "at_least": False, "at_most": True}
  for (a0, t0), (a1, t1) in zip(pts, pts[1:], strict=False):
    if a0 < acr <= a1:
      t = t0 + (t1 - t0) * (acr - a0) / (a1 - a0)
      return {"ratio": t / seconds, "at_least": False, "at_most": False}
  return {"ratio": pts[-1][1] / seconds, "at_least": True, "at_most": False}


def report(cfg: Config, runs: dict, sigma: float) -> dict:
  """One sigma's figures: every configuration's summary and the time ratios."""
  out: dict = {"parent": _summary(runs["parent"], n=cfg.parent_n, recertify=False)}
  for name in cfg.children:
    scratch = {n: _summary(runs[(name, "scratch", n)], n=n, recertify=False)
               for n in cfg.scratch_n}  # fmt: skip
    rec = {n: _summary(runs[(name, "recertify", n)], n=n, recertify=True) for n in cfg.recert_n}
    replay = {n: _summary(runs[(name, "replay", n)], n=n, recertify=True, replay=True)
              for n in cfg.recert_n}  # fmt: skip
    pts = [(s["acr"], s["seconds_per_image"]) for s in scratch.values()]
    passes = [(s["acr"], s["forward_passes_per_image"]) for s in scratch.values()]
    for n, r in [*rec.items(), *replay.items()]:
      r["time_ratio_at_equal_acr"] = ratio_at_equal_acr(r["acr"], r["seconds_per_image"], pts)
      r["pass_ratio_at_equal_acr"] = ratio_at_equal_acr(
        r["acr"], r["forward_passes_per_image"], passes
      )
      if "forward_passes_replay_per_image" in r:
        r["replay_pass_ratio_at_equal_acr"] = ratio_at_equal_acr(
          r["acr"], r["forward_passes_replay_per_image"], passes
        )
      if n in scratch:  # the same n_p
        s = scratch[n]
        r["same_n_p"] = {
          "acr_gain": r["acr"] - s["acr"],
          "seconds_ratio": s["seconds_per_image"] / r["seconds_per_image"],
        }
    out[name] = {"recertify": {str(k): v for k, v in rec.items()},
                 "replay": {str(k): v for k, v in replay.items()},
                 "scratch": {str(k): v for k, v in scratch.items()}}  # fmt: skip
  votes = json.load(open(runs["parent"] + ".votes.npz.seconds.json"))["seconds"]
  out["parent"]["votes_seconds_per_image"] = votes / out["parent"]["images"]
  return out


def plot(cfg: Config, results: dict, path: str) -> None:
  """ACR against seconds an image, from scratch (line) and incrementally (marks), per sigma."""
  import matplotlib
  import matplotlib.ticker

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, axes = plt.subplots(1, len(cfg.sigmas), figsize=(4.2 * len(cfg.sigmas), 3.4))
  for ax, sigma in zip(np.atleast_1d(axes), cfg.sigmas, strict=True):
    res = results.get(f"sigma={sigma:g}")
    if res is None:
      continue
    for name, color in zip(cfg.children, ("C0", "C1"), strict=False):
      s = res[name]["scratch"]
      ax.plot([v["seconds_per_image"] for v in s.values()], [v["acr"] for v in s.values()],
              "-o", color=color, label=f"{name} from scratch")  # fmt: skip
      r = res[name]["recertify"]
      ax.plot([v["seconds_per_image"] for v in r.values()], [v["acr"] for v in r.values()],
              "*", ms=12, color=color, label=f"{name} recertified")  # fmt: skip
      r = res[name]["replay"]
      ax.plot([v["seconds_per_image"] for v in r.values()], [v["acr"] for v in r.values()],
              "D", ms=7, mfc="none", color=color, label=f"{name} replayed")  # fmt: skip
    ax.axhline(res["parent"]["acr"], color="gray", ls=":", label=f"parent (N {cfg.parent_n:,})")
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.set_title(f"sigma {sigma:g}")
    ax.set_xlabel("seconds an image (2-core CPU)")
    ax.set_ylabel("ACR")
  np.atleast_1d(axes)[0].legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=110)


def _ratio(r: dict) -> str:
  return ("≥ " if r["at_least"] else "≤ " if r["at_most"] else "") + f"{r['ratio']:.2f}x"


def table(results: dict, how: str = "recertify") -> str:
  """The guide's table of the fresh-noise children (``how="recertify"``) or the replayed ones
  (``"replay"``): per sigma, child and n_p, ACR recertified / from scratch at the same n_p,
  the switched share, seconds an image of both, and the ratios at equal ACR (with the
  projected replay's passes for the fresh-noise children)."""
  fresh = how == "recertify"
  word = "recertified" if fresh else "replayed"
  head = (
    f"| sigma | child | n_p | ACR {word} / from scratch | switched | s an image {word} / from "
    "scratch | time ratio at equal ACR | forward-pass ratio at equal ACR |"
  )
  lines = [head + (" the same with replay (projected) |" if fresh else ""),
           "|---" * (9 if fresh else 8) + "|"]  # fmt: skip
  for key, res in results.items():
    if not key.startswith("sigma="):
      continue
    for child in (k for k in res if k != "parent"):
      for n, r in res[child][how].items():
        s = res[child]["scratch"][n]
        ratios = [r["time_ratio_at_equal_acr"], r["pass_ratio_at_equal_acr"]]
        ratios += [r["replay_pass_ratio_at_equal_acr"]] if fresh else []
        lines.append(
          f"| {key[6:]} | {child}{'' if fresh else ' replayed'} | {int(n):,} | "
          f"{r['acr']:.3f} / {s['acr']:.3f} | {r['switched_share']:.2f} | "
          f"{r['seconds_per_image']:.2f} / {s['seconds_per_image']:.2f} | "
          + " | ".join(_ratio(x) for x in ratios)
          + " |"
        )
  return "\n".join(lines)


def run(cfg: Config) -> dict:
  """Every sigma's runs and report; writes ``results`` ``.json`` and ``.png``."""
  results: dict = {"config": {k: v for k, v in dataclasses.asdict(cfg).items()
                              if k not in ("out", "results")}}  # fmt: skip
  for sigma in cfg.sigmas:
    runs = _runs(cfg, sigma)
    results[f"sigma={sigma:g}"] = report(cfg, runs, sigma)
    with open(cfg.results + ".json", "w") as f:
      json.dump(results, f, indent=1, sort_keys=True)
    print(f"sigma {sigma:g}: done", flush=True)
  plot(cfg, results, cfg.results + ".png")
  print(table(results))
  print(table(results, "replay"))
  return results


def main(argv=None) -> dict:
  """The command line: ``--quick``, ``--sigmas``."""
  flags = {"cifar-shaped": "ResNet-20 on the digits padded to 32x32x3 (mnist5k32)"}
  return run(_common.sigmas_config(__doc__, get_config, argv, flags))


if __name__ == "__main__":
  main()
