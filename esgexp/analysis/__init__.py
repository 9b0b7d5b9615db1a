"""What finished runs say: intervals and paired tests (stats.py), comparing runs item by item (compare.py),
and the settings that tell runs of one name apart (variants.py)."""
