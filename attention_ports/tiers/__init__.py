"""Other sources of cases than the committed catalogue: ``random`` (``verify --random``: cases
drawn by hypothesis and certified at run time) and ``scale`` (``verify --tier scale``: L = 1024 to
16384). May import every layer up to ``tools``; above sit ``pipeline`` (which runs them as case
sources of the one verify pipeline), the CLI and the pytest plugin.
"""
