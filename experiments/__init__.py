"""Studies run with Ponder: each keeps its code, its report and plots, and the rows its
numbers are computed from. Not part of the installed package; run from a clone, e.g.
``python -m experiments.smollm2_refine report ...``. Experiments import the packages
(``scaffolds``, ``training``, ``clients``), never each other, and nothing imports them.
"""
