"""The run lifecycle every command shares: config and its settings' rules, a job's identity, the run folder,
outputs written whole, tracking (MLflow or a pending record), sweeps, locks, and the one order of a job's
steps (jobs.py, run.py). Nothing here knows a task kind, a backend or a dataset by name."""
