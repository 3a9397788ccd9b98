"""The applications on top of the library, each imported by name (nothing below imports them).

* :mod:`rsjax.app.launch`: a certify or predict run from its flags, the one certify path.
* :mod:`rsjax.app.demo`: ``rsjax demo``, train, certify and verify end to end.
* :mod:`rsjax.app.audit`: ``rsjax audit``, a run's counts drawn again with its model.
* :mod:`rsjax.app.bench`: ``rsjax bench``, the sampling throughput of a model.
* :mod:`rsjax.app.cli`: the ``rsjax`` command, one module per command.
"""
