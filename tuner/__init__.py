"""tunehub's tuning engine: spaces, rendering, compiling, measuring, searching.

It never imports ``service`` and never touches a database or the network: it takes a
:class:`~tuner.types.TuneRequest` and returns :class:`~tuner.types.ProblemResult` values.
Import each name from the module that defines it: the requests and results from
:mod:`tuner.types`, the problems from :mod:`tuner.problems`, the errors from
:mod:`tuner.errors`, the engine from :mod:`tuner.engine`.
"""
