"""R: the adapter (cases to calls, layouts, results) and the worker process embedding R through
rpy2 (``python -m attention_ports.runtimes.r.worker FILE...``). Part of the ``runtimes`` layer; the
R code it runs is data (``ports/r/``, located by ``core.paths``)."""
