"""Where data lives over the PS servers: the placement of variables and table rows over
shards (`sharding`), and each shard's replica chain and call metadata (`replicas`)."""
