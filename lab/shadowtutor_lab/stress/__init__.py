"""Stress tools that run against a live server: load (``load*.py``) and fuzzing."""
