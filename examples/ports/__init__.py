"""Well-known example apps of other libraries, written with kumiko-typed from its docs: the
bank accounts and the wiki of ``eventsourcing``, an order saga in the style of Temporal and
DBOS, Temporal's money transfer, background check and subscription, Marten's help desk, a
shop's catalogue and carts in the style of ``eventsourcing`` and Marten, and Axon's gift
cards.  Tests: tests/{pipeline,storage,workflows}/test_port_*.py."""
