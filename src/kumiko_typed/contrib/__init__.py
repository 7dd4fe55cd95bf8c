"""Optional extras, each behind its own install extra (DESIGN §2.1).

- :mod:`kumiko_typed.contrib.asgi` (extra ``asgi``): the write handlers served over HTTP
  by Starlette, see docs/http.md.
- :mod:`kumiko_typed.contrib.schema` (no extra): JSON Schema of attrs payload classes.
- :mod:`kumiko_typed.contrib.alembic` (no extra; Alembic is the application's): the
  ``context.configure`` options that make autogenerate write the App's tables as
  ``create_all`` makes them, see docs/operations.md.

Nothing in the core library imports this package.
"""
