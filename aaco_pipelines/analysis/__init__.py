"""Turning measured sessions into findings: what limits a model, and what to do about it."""
