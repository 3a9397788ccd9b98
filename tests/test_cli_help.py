"""``rsjax certify --help``, ``predict --help`` and ``train --help`` in argument groups: the core
flags first in a natural order (``--N0`` beside ``--N``), then one group per method, then output
and execution; every flag in exactly one group."""

import argparse

import pytest

from rsjax import methods
from rsjax.app.cli import build_parser


def _command(name: str) -> argparse.ArgumentParser:
  return build_parser(name)._subparsers._group_actions[0].choices[name]


def _groups(parser) -> list[tuple[str, list[str]]]:
  """``[(title, [first option string of each flag])]`` in help order."""
  return [
    (g.title, [a.option_strings[0] if a.option_strings else a.dest for a in g._group_actions])
    for g in parser._action_groups
    if g._group_actions
  ]


def _method_groups(options_of) -> dict[str, set[str]]:
  """``{"--method a, b": {flags}}``: the options of the registered methods by their users."""
  users: dict[str, list[str]] = {}
  for m in methods.available():
    for o in options_of(m):
      users.setdefault("--" + o.name.replace("_", "-"), []).append(m.name)
  out: dict[str, set[str]] = {}
  for flag, who in users.items():
    out.setdefault(f"--method {', '.join(who)}", set()).add(flag)
  return out


@pytest.mark.parametrize("command", ["certify", "predict", "train"])
def test_every_flag_is_in_one_group(command):
  parser = _command(command)
  grouped = [a for g in parser._action_groups for a in g._group_actions]
  assert len(grouped) == len(set(map(id, grouped))) == len(parser._actions)


def test_certify_groups_core_first_then_methods_then_output():
  groups = _groups(_command("certify"))
  titles = [t for t, _ in groups]
  assert titles[:5] == ["positional arguments", "options", "the run", "the model", "computation"]
  assert titles[-1] == "output and execution"
  run = dict(groups)["the run"]
  assert run[:4] == ["--dataset", "--data-dir", "--split", "--sigma"]
  assert run.index("--N") == run.index("--N0") + 1
  assert {"--alpha", "--noise", "--method", "--multiclass", "--seed", "--max"} <= set(run)
  from rsjax.app.cli.flags import certify_options

  expected = _method_groups(certify_options)
  assert {t: set(f) for t, f in groups[5:-1]} == expected
  assert titles[5:-1] == list(expected)  # in the order of the registry
  assert {"--overwrite", "--quiet", "--save-counts", "--cache-dir"} <= set(dict(groups)[titles[-1]])


def test_train_groups_core_first_then_methods_then_output():
  from rsjax.app.cli.flags import training_options

  groups = _groups(_command("train"))
  titles = [t for t, _ in groups]
  assert titles[:6] == [
    "options",
    "the model and data",
    "schedule and optimizer",
    "objective",
    "Sun et al.'s strategies",
    *list(_method_groups(training_options))[:1],
  ]
  assert dict(groups)["the model and data"][:3] == ["--model", "--dataset", "--data-dir"]
  assert {t: set(f) for t, f in groups[5:-1]} == _method_groups(training_options)
  assert dict(groups)["output and execution"] == ["--out", "--overwrite", "--quiet"]


def test_certify_help_is_short_and_grouped(capsys):
  with pytest.raises(SystemExit):
    build_parser("certify").parse_args(["certify", "--help"])
  text = capsys.readouterr().out
  assert text.startswith("usage: rsjax certify [MODEL_DIR] OUTFILE [flags]\n")
  at = text.index("\nthe run:")
  assert text.index("--N0", at) < text.index("--N N", at) < text.index("\n--method cohen:")
  assert text.index("\n--method cohen:") < text.index("\noutput and execution:")
