"""The implementations and how each is run: everything that produces an actual output.

The implementation interface (``impl``), the names and how each is built (``registry``), the
reference and torch implementations (``builtin``, ``torch_impl``), a port's declaration
(``declaration``), and the foreign runtimes: the wire protocol (``protocol``), the supervisor of a
worker process (``supervisor``, ``reaper``), and per language an adapter and its worker (``r/``,
``julia/``; workers start as ``python -m attention_ports.runtimes.r.worker`` or ``julia
worker.jl``). May import ``core``, ``reference``, ``spec``, ``truth`` and ``fixtures``.
"""
