"""Project scripts (importable so tests can call their checks)."""
