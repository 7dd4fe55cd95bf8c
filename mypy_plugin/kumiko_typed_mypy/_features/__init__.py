"""One module per concern; ``kumiko_typed_mypy._plugin`` wires them to hook names.

A feature imports helpers from ``_typeops`` and the tables ``_errors``, ``_names`` and
``_rules``, never another feature (``typecheck_tests/test_plugin_package.py`` checks it).
"""
