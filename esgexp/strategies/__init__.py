"""Prompt building strategies."""
