"""Other sources of cases than the committed catalogue: ``random`` (``verify --random``: cases
drawn by hypothesis and certified at run time) and ``scale`` (``verify --tier scale``: L = 1024 to
16384). May import every layer up to ``tools``; only the CLI and the pytest plugin sit above.
"""
