"""Helpers shared by tests: record and report factories, lint file writers, a Kineto trace
builder. Importable as `helpers.<module>` from every test: pytest puts `tests/` (the folder of
the top conftest.py) on the import path."""
