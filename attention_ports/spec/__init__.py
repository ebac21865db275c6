"""The specification: what is computed and on which cases, independent of how it is judged.

The operation table (``ops``: names, arguments, outputs, roles), the masked-query conventions
(``conventions``: the one home of their names), an output as a port sees it (``portview``), the
case catalogue and its input makers (``catalogue``) and the hypothesis strategies per operation
(``strategies``). May import ``core`` and ``reference`` only.
"""
