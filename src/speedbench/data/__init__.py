"""Prompt data: the split schema, prompt-set files and offline sources."""
