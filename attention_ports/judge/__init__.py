"""The judge: implementations run over cases, every output compared and explained.

The result model (``results``: ``OutputResult``, ``CaseResult``, the statuses), the runner
(``runner``: implementations side by side over fixture cases), the one comparator (``compare``)
and the diagnoses of known mistakes (``diagnose``). May import every layer below it: ``core``,
``reference``, ``spec``, ``truth``, ``fixtures``, ``runtimes``.
"""
