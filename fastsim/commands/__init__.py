"""Command modules."""
