"""The tools around a run: ``bench`` (speed and memory, measured), ``coverage`` (the matrix of what
the cases cover), ``mutation`` (the mutation kit, ``mutants.toml``), ``doctor`` (what this machine
can run), ``skeleton`` (``attention-ports init``: a port skeleton) and ``installers`` (``setup``).
May import every layer up to ``report``; never ``tiers`` or the CLI.
"""
