"""Built-in example models that run on the PS runtime."""
