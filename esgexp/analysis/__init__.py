"""What finished runs say: comparing runs item by item (compare.py, with the intervals and tests of
esgexp/eval/stats.py) and the settings that tell runs of one name apart (variants.py)."""
