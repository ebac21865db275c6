"""Julia: the adapter, the supervised worker transport (``julia ports/julia/worker.jl``), the
in-process juliacall transport and the custom system image (``sysimage``). Part of the
``runtimes`` layer; the Julia code it runs is data (``ports/julia/``, located by ``core.paths``)."""
