"""The seed papers' tables: their published cells as data (``tables/<name>.csv``, ``cells.py``), the grid
of ordinary jobs that reproduces each (``conf/paper/<name>.yaml``, ``grid.py``), what a grid would send
(``estimate.py``) and ours laid beside theirs (``report.py``). The command is ``python -m esgexp.paper``."""

# The tables one can reproduce: conf/paper/<name>.yaml and esgexp/papers/tables/<name>.csv.
TABLES = ("esgenius_table2", "sustainableqa_table4", "sustainableqa_table5", "climretrieve_table_r1", "esgbench")
