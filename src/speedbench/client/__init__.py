"""Async load generation against engine servers."""
