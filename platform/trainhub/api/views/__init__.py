"""User-facing REST API views: thin, each calls one service or selector."""
