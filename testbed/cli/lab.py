"""`railab` sub-commands for this area (registered by testbed.cli)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach this module's commands to `app`."""
