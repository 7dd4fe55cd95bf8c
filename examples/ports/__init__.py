"""Well-known example apps of other libraries, written with kumiko-typed from its docs: the
bank accounts, the wiki and the cargo shipping of ``eventsourcing``, the course
subscriptions of the Dynamic Consistency Boundary write-ups, an order saga in the style of
Temporal and DBOS, Temporal's money transfer, background check and subscription, Marten's
help desk, a shop's catalogue and carts in the style of ``eventsourcing`` and Marten, and
Axon's gift cards, among others.  Tests: tests/{pipeline,storage,workflows}/test_port_*.py."""
