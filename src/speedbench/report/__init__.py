"""Tables and plots from measured summaries."""
