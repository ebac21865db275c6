"""attention-ports: verify R and Julia ports of attention against a NumPy reference, case by case.

The package is layered; each subpackage may import only the layers listed before it (its
``__init__`` says what it owns), so the tree reads bottom-up:

``core`` (paths, atomic I/O, validation of untrusted input, progress, report targets) <
``reference`` (the NumPy reference; the repository's top-level ``reference/``) < ``spec`` (the
operations, conventions, catalogue, strategies) < ``truth`` (certified expected values and their
bounds) < ``fixtures`` (the golden files on disk) < ``runtimes`` (implementations and the foreign
workers) < ``judge`` (the result model, runner, comparator, diagnoses) < ``report`` (every output
format) < ``tools`` (bench, coverage, mutation kit, doctor, init, installers) < ``tiers`` (generated
cases, the scale tier) < ``pipeline`` (the one verify pipeline over every case source, shards and
their merge) < the top: ``cli``, ``pytest_plugin`` and ``conformance``.
"""
