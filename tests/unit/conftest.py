"""Unit tests: pure logic, no servers, no forked workers (those live in tests/integration)."""
