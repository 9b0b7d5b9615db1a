"""Dataset loaders producing the shared record types."""
