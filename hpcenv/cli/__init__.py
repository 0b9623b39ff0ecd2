"""Typer CLI: thin command modules over hpcenv's core."""
