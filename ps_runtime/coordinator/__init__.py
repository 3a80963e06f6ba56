"""The training API on the coordinator and the workers: the cluster, the strategy and its
variable handles, the `ClusterCoordinator` with its closures and queue, the worker service
that runs them, checkpoints on a schedule, stop requests and evaluation."""
