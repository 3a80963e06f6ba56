"""Standalone mode: one command, SQLite, an embedded broker and channel layer, a local agent."""
