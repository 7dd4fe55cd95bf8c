"""Well-known example apps of other libraries, written with kumiko-typed from its docs: the
bank accounts of ``eventsourcing``, an order saga in the style of Temporal and DBOS, and
Axon's gift cards.  Tests: tests/pipeline/test_port_*.py, tests/workflows/test_port_*.py."""
