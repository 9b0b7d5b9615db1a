"""Memory plans before anything loads: a model's bytes per device for training or serving (plan.py), and
``dry_run=true`` (dry_run.py)."""
