"""The dynamics method's paper experiments (registered in ``geosteer_paper.dynamics``), run as
``geosteer study dynamics <name>``:
one module per group (critical geometry, continuation, prefix and editing, parallelisation) and
:mod:`.common` for what they share with the tool verbs of :mod:`geosteer.dynamics.cli`."""
