"""Converters from public cluster traces to the simulator's CLUSTER.yaml and TRACE.csv."""
