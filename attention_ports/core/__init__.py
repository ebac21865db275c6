"""The core: what every layer may use and what imports nothing of the project.

Where the data lives in a checkout or an installed wheel (``paths``), files written whole or not
at all (``io``), untrusted input checked before use against the shipped JSON Schemas
(``validate``), progress on stderr (``progress``), the wrong-language hint (``language``) and report
targets proved writable before a run (``targets``). Modules here import no other layer (only the
standard library, NumPy and jsonschema).
"""
