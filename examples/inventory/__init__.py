"""The flagship example: products with stock, written through events."""
