"""``rsjax certify --method dual``: honest runs verify and audit; edited estimator counts or
an edited chosen sigma fail verify or audit."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from run_edits import copy_run, edit_column, edit_record

from rsjax import models, verify
from rsjax.app import audit, cli

SIGMAS = (0.12, 0.5)  # 0.12 and the estimator's 0.3: no float32 is exact (the engine's)
SIGMA_G = 0.3


def _model(path, num_classes, seed, sigma):
  m = models.create_model("mlp", num_classes=num_classes, input_shape=(8, 8, 1), rngs=seed)
  config = {"model": "mlp", "num_classes": num_classes, "input_shape": [8, 8, 1], "sigma": sigma}
  models.save_model(path, m, config)
  return path


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  base = tmp_path_factory.mktemp("dual")
  est = _model(base / "estimator", 2, 0, SIGMA_G)
  experts = ",".join(f"{s}:{_model(base / f'e{s}', 10, 1 + i, s)}" for i, s in enumerate(SIGMAS))
  out = base / "dual.tsv"
  argv = ["certify", est, out, "--method", "dual", "--dual-experts", experts, "--dataset",
          "digits", "--N", "400", "--N0", "40", "--skip", "30", "--batch", "400", "--quiet"]  # fmt: skip
  assert cli.main([str(a) for a in argv]) == 0
  return est, out


def _records(path):
  return [json.loads(line) for line in (path.parent / (path.name + ".cert.jsonl")).open()]


@pytest.mark.heavy
def test_honest_run_verifies_and_audits(run):
  est, out = run
  rep = verify.verify(out)
  assert rep.ok, rep.summary()
  recs = _records(out)
  assert {r["sigma_index"] for r in recs} <= {-1, 0, 1}
  assert all(len(r["estimator_counts"]) == 2 for r in recs)
  assert audit.audit(out, model_dir=est, rows="all").ok


def _caught(est, path):
  # The forged copies lie in another folder than the experts: the audit is told where.
  found = audit.audit(path, model_dir=est, rows="all", experts_dir=est.parent)
  return not verify.verify(path).ok or not found.ok


def test_edited_estimator_counts_are_caught(run, tmp_path):
  est, out = run
  f = copy_run(out, tmp_path / "forged.tsv")
  r0 = _records(out)[0]

  def move(r):
    c = r["estimator_counts"]
    top = max(range(2), key=c.__getitem__)
    c[top], c[1 - top] = c[top] + c[1 - top] // 2 + 1, c[1 - top] - c[1 - top] // 2 - 1
    if c[1 - top] < 0:
      c[top], c[1 - top] = c[top] - 1, 0  # all on one index already: move one the other way
      c[top], c[1 - top] = c[top] - 1, c[1 - top] + 1
    return r

  edit_record(f, r0["idx"], move)
  assert _caught(est, f)


def test_edited_sigma_choice_is_caught(run, tmp_path):
  est, out = run
  recs = _records(out)
  j = next(i for i, r in enumerate(recs) if r["sigma_index"] >= 0)
  f = copy_run(out, tmp_path / "forged.tsv")
  k = recs[j]["sigma_index"]
  edit_record(f, recs[j]["idx"], lambda r: {**r, "sigma_index": 1 - k})
  edit_column(f, j, "sigma_index", lambda _: str(1 - k))
  edit_column(f, j, "sigma", lambda _: repr(SIGMAS[1 - k]))
  assert not verify.verify(f).ok


def test_consistent_forgery_passes_verify_fails_the_audit(run, tmp_path):
  """A forger who moves an estimator count and rewrites the row to match: verify cannot
  tell, the audit draws the estimator's counts again."""
  from rsjax.claims import binary_radius, cp_lower
  from rsjax.dual._certify import split_alpha

  est, out = run
  recs = _records(out)
  predicts = [line.split("\t")[2] for line in out.read_text().split("\n")[1:] if line]
  # A row whose estimator chose (and could lose a count) and whose classifier abstained:
  # its radius is 0 whatever R_g is, so only the estimator_radius column changes.
  j = next(
    i
    for i, r in enumerate(recs)
    if r["sigma_index"] >= 0 and predicts[i] == "-1" and 0 < min(r["estimator_counts"])
  )
  f = copy_run(out, tmp_path / "forged.tsv")
  k = recs[j]["sigma_index"]

  def move(r):
    r["estimator_counts"][k] += 1
    r["estimator_counts"][1 - k] -= 1
    return r

  edit_record(f, recs[j]["idx"], move)
  a1, _ = split_alpha(0.001, 0.5)
  p = cp_lower(recs[j]["estimator_counts"][k] + 1, 400, a1)
  gauss = {"family": "gaussian", "norm": "l2", "name": "gaussian"}
  r_g = float(binary_radius(p, float(np.float32(SIGMA_G)), gauss, 1))
  edit_column(f, j, "estimator_radius", lambda _: repr(r_g))
  assert verify.verify(f).ok
  a = audit.audit(f, model_dir=est, rows="all", experts_dir=est.parent)
  assert not a.ok and "estimator_counts" in a.reason


def test_an_expert_run_at_sigma_0_12_verifies(run, tmp_path):
  """The engine draws and takes the radius at float32(sigma); verify does too (a run at
  sigma 0.12 was refused: its radii 2e-8 below those of sigma 0.12 in float64)."""
  est, out = run
  where = str(est).replace("estimator", "e0.12")
  path = tmp_path / "cohen.tsv"
  argv = ["certify", where, path, "--sigma", "0.12", "--dataset", "digits", "--N", "400",
          "--N0", "40", "--skip", "30", "--batch", "400", "--quiet"]  # fmt: skip
  assert cli.main([str(a) for a in argv]) == 0
  rep = verify.verify(path)
  assert rep.ok, rep.summary()
  radii = [float(line.split("\t")[3]) for line in path.read_text().split("\n")[1:] if line]
  assert max(radii) > 0  # the check compared positive radii


@pytest.mark.heavy
def test_train_the_estimator_on_the_experts_targets(tmp_path):
  """``rsjax train --method dual``: a K-class estimator from the experts' routing targets."""
  experts = ",".join(
    f"{s}:{_model(tmp_path / f'e{s}', 10, 1 + i, s)}" for i, s in enumerate(SIGMAS)
  )
  out = tmp_path / "est"
  argv = ["train", "--method", "dual", "--dual-experts", experts, "--dual-draws", "2",
          "--dataset", "digits", "--model", "mlp", "--sigma", "0.25", "--epochs", "1",
          "--batch", "128", "--out", out, "--quiet"]  # fmt: skip
  assert cli.main([str(a) for a in argv]) == 0
  config = models.read_config(out)
  assert config["num_classes"] == 2 and config["dual_sigmas"] == list(SIGMAS)


def test_targets_pick_the_expert_with_the_larger_radius():
  import jax
  import jax.numpy as jnp
  import numpy as np

  from rsjax.dual.training import estimator_targets

  def const(c):
    return lambda params, x: jnp.tile(jax.nn.one_hot(c, 3), (x.shape[0], 1))

  x = np.zeros((4, 2), np.float32)
  y = np.asarray([0, 1, 2, 1])
  # Expert 0 (sigma 0.25) always says 1, expert 1 (sigma 0.5) always 0: each input's target
  # is the one right about it, the smallest sigma when neither is.
  got = estimator_targets(
    jax.random.key(0), [(const(1), None), (const(0), None)], (0.25, 0.5), x, y
  )
  assert got.tolist() == [1, 0, 0, 0]


@pytest.mark.heavy
def test_two_rounds_fine_tune_the_experts_the_estimator_routes_to(tmp_path):
  """``--dual-rounds 2 --dual-expert-epochs 1``: round 2 routes the training digits by the
  round-1 estimator, fine-tunes each expert on its own (copies under ``rounds/``; the given
  experts' files are untouched) and names the experts to certify with."""
  dirs = [_model(tmp_path / f"e{s}", 10, 1 + i, s) for i, s in enumerate(SIGMAS)]
  before = [models.to_apply_fn(models.load_model(d)[0])[1] for d in dirs]
  experts = ",".join(f"{s}:{d}" for s, d in zip(SIGMAS, dirs, strict=True))
  out = tmp_path / "est"
  argv = ["train", "--method", "dual", "--dual-experts", experts, "--dual-draws", "2",
          "--dual-rounds", "2", "--dual-expert-epochs", "1", "--dataset", "digits",
          "--model", "mlp", "--sigma", "0.25", "--epochs", "1", "--batch", "128", "--out",
          out, "--quiet"]  # fmt: skip
  assert cli.main([str(a) for a in argv]) == 0
  assert (out / "rounds" / "estimator_1" / "config.json").exists()
  tuned = sorted(p.name for p in (out / "rounds" / "experts_2").iterdir())
  assert tuned and set(tuned) <= {f"sigma_{s:g}" for s in SIGMAS}
  for d, params in zip(dirs, before, strict=True):  # the experts given stay as they were
    import jax

    after = models.to_apply_fn(models.load_model(d)[0])[1]
    assert all(jax.tree.leaves(jax.tree.map(lambda a, b: bool((a == b).all()), params, after)))
  for name in tuned:  # a fine-tuned expert keeps its architecture and has new weights
    s = float(name.split("_")[1])
    m, config = models.load_model(out / "rounds" / "experts_2" / name)
    assert config["num_classes"] == 10 and config["sigma"] == s
    old = before[SIGMAS.index(s)]
    new = models.to_apply_fn(m)[1]
    assert not all(jax.tree.leaves(jax.tree.map(lambda a, b: bool((a == b).all()), old, new)))


@pytest.mark.heavy
def test_next_round_routes_by_the_smoothed_majority_and_keeps_an_unrouted_expert():
  import jax

  from rsjax import training
  from rsjax.dual.training import consistent_targets, expert_hits, next_round, vote_shares

  x = jax.random.uniform(jax.random.key(0), (24, 8, 8, 1))
  y = np.arange(24) % 10
  est = models.create_model("mlp", num_classes=2, input_shape=(8, 8, 1), rngs=0)
  from rsjax.dual import shift_logits

  shift_logits(est, [0.0, 50.0])  # every vote goes to expert 1
  experts = [models.create_model("mlp", num_classes=10, input_shape=(8, 8, 1), rngs=i)
             for i in (1, 2)]  # fmt: skip
  cfg = training.TrainConfig(sigma=0.0, epochs=1, batch_size=8, lr=0.05)
  key = jax.random.key(3)
  step = next_round(key, est, experts, SIGMAS, (np.asarray(x), y), sigma_estimator=0.3,
                    draws=4, expert_config=cfg, workdirs=[None, None],
                    model_configs=[None, None])  # fmt: skip
  assert step.routes.tolist() == [1] * 24
  assert step.experts[0] is experts[0] and step.experts[1] is not experts[1]
  share = vote_shares(jax.random.fold_in(key, 0), *models.to_apply_fn(est), np.asarray(x),
                      sigma=0.3, draws=4)  # fmt: skip
  assert share[:, 1].tolist() == [1.0] * 24
  fns = [models.to_apply_fn(m) for m in step.experts]
  hits = expert_hits(jax.random.fold_in(key, 2), fns, SIGMAS, np.asarray(x), y, draws=4)
  from rsjax.dual.training import targets_from_hits

  fallback = targets_from_hits(hits, SIGMAS, draws=4)
  want = consistent_targets(share, hits, fallback, keep=0.5)
  assert step.targets.tolist() == want.tolist()
  # Without an expert config the experts stay: the same objects.
  fixed = next_round(key, est, experts, SIGMAS, (np.asarray(x), y), sigma_estimator=0.3,
                     draws=4, expert_config=None, workdirs=[None, None],
                     model_configs=[None, None])  # fmt: skip
  assert all(a is b for a, b in zip(fixed.experts, experts, strict=True))


def _argv(est, out, experts, *more):
  return ["certify", est, out, "--method", "dual", "--dual-experts", experts, "--dataset",
          "digits", "--N", "400", "--N0", "40", "--skip", "30", "--batch", "400", "--quiet",
          *more]  # fmt: skip


def test_the_record_names_the_experts_relative_and_binds_them(run):
  """Item 3 of issue 68: the experts' fingerprints and configuration digests are options,
  so part of the claim (and the key); their paths relative to the result file's folder."""
  from rsjax.records.spec import RunSpec

  _, out = run
  spec = RunSpec.read(out)
  assert spec.options["dual_experts"] == "0.12:e0.12,0.5:e0.5"
  facts = [f"{e['fingerprint']}:{e['config']}" for e in spec.details["experts"]]
  assert spec.options["dual_expert_models"] == ",".join(facts)
  assert "dual_expert_models" in spec.claim()["method"]["options"]


def test_other_experts_under_the_same_names_change_the_claim(run, tmp_path):
  """Red team 8: other models copied under the experts' names gave the same claim digest,
  the same noise, and both checks passed. Now the claim (so the noise) moves with them, and
  the run's audit against the swapped experts fails."""
  from rsjax.records.spec import RunSpec

  est, out = run
  shutil.copytree(out.parent, tmp_path / "a")
  a = tmp_path / "a"
  shutil.rmtree(a / "e0.12")
  _model(a / "e0.12", 10, 9, 0.12)  # another model under the same name
  assert not audit.audit(a / "dual.tsv", model_dir=a / "estimator", rows=2, seed=0).ok
  again, first = a / "again.tsv", tmp_path / "first.tsv"
  assert cli.main([str(v) for v in _argv(a / "estimator", again, "0.12:" + str(a / "e0.12") +
                                         ",0.5:" + str(a / "e0.5"), "--max", "61")]) == 0  # fmt: skip
  assert cli.main([str(v) for v in _argv(est, first, "0.12:" + str(est.parent / "e0.12") +
                                         ",0.5:" + str(est.parent / "e0.5"), "--max", "61")]) == 0  # fmt: skip
  assert RunSpec.read(again).claim_digest() != RunSpec.read(first).claim_digest()
  assert verify.verify(again).ok


def test_a_record_without_bound_experts_fails_verify(run, tmp_path):
  from rsjax.records.spec import RunSpec

  _, out = run
  f = copy_run(out, tmp_path / "old.tsv")
  rec = json.loads(open(str(f) + ".run.json").read())
  del rec["method"]["options"]["dual_expert_models"]
  rec["key"]["claim"] = RunSpec.from_json(rec).claim_digest()
  open(str(f) + ".run.json", "w").write(json.dumps(rec))
  rep = verify.verify(f)
  assert not rep.ok and any("does not bind the experts" in str(m) for m in rep.mismatches)


def test_a_moved_run_checks_from_another_directory(run, tmp_path, monkeypatch, capsys):
  """Red team 8: from another directory an honest Dual run's audit failed (exit 1, "no usable
  model in 'e025'"). A missing expert is "cannot audit" (exit 2), never FAILED."""
  est, out = run
  moved, elsewhere = tmp_path / "moved", tmp_path / "cwd"
  shutil.copytree(out.parent, moved)
  elsewhere.mkdir()
  monkeypatch.chdir(elsewhere)
  argv = ["audit", moved / "dual.tsv", "--model-dir", moved / "estimator", "--rows", "3"]
  assert cli.main([str(v) for v in ["verify", moved / "dual.tsv"]]) == 0
  assert cli.main([str(v) for v in argv]) == 0
  shutil.rmtree(moved / "e0.5")
  capsys.readouterr()
  assert cli.main([str(v) for v in argv]) == 2
  assert "--experts-dir" in capsys.readouterr().err
  assert cli.main([str(v) for v in [*argv, "--experts-dir", est.parent]]) == 0


def test_analyze_reads_only_declared_radius_columns_labelled(run, capsys):
  """Red team 8: --radius-column read estimator_radius, sigma or sigma_index as radii with
  no label. Only a declared radius column is read, headed "not the certified radius"."""
  _, out = run
  assert cli.main(["analyze", str(out), "--radius-column", "estimator_radius"]) == 0
  text = capsys.readouterr().out
  assert "dual.tsv [estimator_radius: not the certified radius]" in text
  assert "the sigma estimator's radius: of the choice of sigma, not of the class" in text
  for column in ("sigma", "sigma_index"):
    assert cli.main(["analyze", str(out), "--radius-column", column]) == 2
    assert "not a radius column of method 'dual'" in capsys.readouterr().err


def test_a_method_column_that_is_not_a_number_is_named(run, tmp_path, capsys):
  """Red team 8: 'could not convert string to float' without the file, line and field."""
  _, out = run
  f = copy_run(out, tmp_path / "abc.tsv")
  edit_column(f, 1, "sigma", lambda _: "abc")
  assert cli.main(["verify", str(f)]) == 2
  err = capsys.readouterr().err
  assert "abc.tsv' line 3: sigma must be a number, got 'abc'" in err, err


@pytest.mark.heavy
def test_train_the_estimator_the_papers_way(tmp_path, capsys):
  """``--dual-target soft --dual-consistency 40 --dual-rebalance``: the paper's training
  (``rsjax.dual.paper``), at a sigma_g no smaller than the largest expert's sigma."""
  experts = ",".join(
    f"{s}:{_model(tmp_path / f'e{s}', 10, 1 + i, s)}" for i, s in enumerate(SIGMAS)
  )
  base = ["train", "--method", "dual", "--dual-experts", experts, "--dual-draws", "4",
          "--dataset", "digits", "--model", "mlp", "--epochs", "1", "--batch", "128",
          "--dual-target", "soft", "--dual-consistency", "40", "--dual-rebalance", "--quiet"]  # fmt: skip
  out = tmp_path / "est"
  assert cli.main([str(a) for a in [*base, "--sigma", "0.5", "--out", out]]) == 0
  config = models.read_config(out)
  assert config["num_classes"] == 2 and config["dual_target"] == "soft"
  recipe = config["dual_recipe"]
  assert recipe["lbd"] == 40 and recipe["consistency"] and recipe["rebalance"]
  assert "the paper's way" in capsys.readouterr().out
  # sigma_g below the largest candidate (0.5) is refused, naming the argument.
  assert cli.main([str(a) for a in [*base, "--sigma", "0.25", "--out", tmp_path / "low"]]) != 0
  assert "sigma_g must be >= the largest candidate" in capsys.readouterr().err
