"""Helpers on mypy's types and call contexts, shared by the feature modules.

Each module of ``_features`` handles one concern and imports its helpers from here,
never from another feature (dry-python/returns keeps its plugin the same way), so a
feature can be read, changed or removed on its own.
"""
