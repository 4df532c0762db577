"""Prefect tasks over the speedbench core: small, with explicit retries, and the MLflow layer."""
