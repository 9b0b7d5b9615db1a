"""Answer parsing and metrics."""
