"""Where a step's answers come from: the engine in the trainer's process or colocated on every rank, the async
generator and its engine pool, and the path new weights take into them (docs/async.md)."""
