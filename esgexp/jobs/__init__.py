"""The job layer: a job's lifecycle (lifecycle.py), its identity (identity.py) and the settings check (settings.py),
above the components and below the task kinds (docs/architecture.md)."""
