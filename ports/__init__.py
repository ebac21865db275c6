"""The R and Julia ports (``ports/r``, ``ports/julia``) and the Python adapters that call them."""
