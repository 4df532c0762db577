"""Prefect flows: they only sequence tasks from ``tasks/``; run them from the project root."""
