"""``railab`` console-script entry point (also ``python3 -m railab``).

This module imports nothing heavy: it installs the Ctrl-C handling first and only then imports
the command line (Typer, rich, pydantic and the model take a few hundred ms), so an interrupt
while modules load exits 130 with one ``error: interrupted`` line instead of a traceback.
"""

from __future__ import annotations

import sys

from railab.errors import EXIT_INTERRUPTED


def main() -> None:
    """Run the ``railab`` command line (``railab.cli.main``); exit 130 on Ctrl-C during start-up.

    Never returns: exits with the command's code (railab.errors: 0 ok, 1 failed, 2 usage,
    130 interrupted).
    """
    try:
        from railab.cli import main as cli_main  # lazy: the heavy imports happen in here
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    cli_main()


if __name__ == "__main__":
    main()
