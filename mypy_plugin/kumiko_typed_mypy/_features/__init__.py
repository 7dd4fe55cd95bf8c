"""One module per concern; ``kumiko_typed_mypy._plugin`` wires them to hook names."""
