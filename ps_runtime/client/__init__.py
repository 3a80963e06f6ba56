"""The client of all PS shards (`client.PSClient`): routes and failover over the replicas,
handles on calls in flight."""
