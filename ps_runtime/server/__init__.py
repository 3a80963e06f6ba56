"""One PS server: the gRPC service, its store of variables and tables with their optimizers
and initializers, replication and rejoin, stats and checkpoints of its shards."""
