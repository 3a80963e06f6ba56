"""Shapes of the user-facing API's resources, one module per area."""
