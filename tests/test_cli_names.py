"""The JAX-free names of ``rsjax train --help`` (``rsjax.app.cli._names``) equal the tables of
the library they are copied from."""

import dataclasses

from rsjax import models, training
from rsjax.app.cli import _names


def test_models_are_the_registry_in_its_order():
  assert _names.MODELS == tuple(models.MODELS)


def test_objectives_are_the_library_objectives():
  assert _names.OBJECTIVES == tuple(training.OBJECTIVES)


def test_training_defaults_are_the_library_defaults():
  library = {
    name: {k: v for k, v in dataclasses.asdict(d).items() if k != "source"}
    for name, d in training.TRAINING_DEFAULTS.items()
  }
  assert _names.TRAINING_DEFAULTS == library
