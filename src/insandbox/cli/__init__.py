"""The `insandbox` command (app.py), one module per command."""
from .app import app, main

__all__ = ["app", "main"]
