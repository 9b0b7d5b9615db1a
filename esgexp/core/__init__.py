"""The ground floor, importing nothing of esgexp above it: config and its resolvers, the kinds of rule a setting
follows, the item records, outputs written whole, tracking (MLflow or a pending record), the run folder and
sweep callbacks. Nothing here knows a task kind, a component or a job (those are esgexp/jobs/ and above)."""
