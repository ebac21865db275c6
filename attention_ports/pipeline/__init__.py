"""The one verify pipeline, above every source of cases: ``verify`` (a case source — the committed
catalogue, ``tiers.random``'s generated cases, ``tiers.scale`` — one selection of implementations,
the judge's one result model, one report), ``shards`` (``verify --shard K/N``: a balanced part of a
run; ``merge-reports``: the shards' reports merged into the whole run's) and ``outcome`` (a run's
report files and exit status, shared by ``verify`` and ``merge-reports``).

Layer: above ``tiers``; may import every layer below it. Only the top (the CLI, the pytest plugin,
the conformance package) imports it. Within it: ``outcome`` < ``shards`` < ``verify``.
"""
