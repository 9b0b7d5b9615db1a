"""Benchmark construction from an ingested corpus (``python -m esgexp.build builder=NAME corpus=DIR``):
``run.py`` the tracked build, ``generate.py`` structured generation with one retry, ``verify.py`` the
ESGBench verifier (also ``python -m esgexp.verify``), one module per builder."""
