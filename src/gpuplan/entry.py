"""The `gpuplan` command's entry point: `queue` and `show ID` (with or without --json) run at once
(commands/jobview.py: no typer, Rich or core import); everything else goes to the full CLI (cli.py)."""

from __future__ import annotations

import sys

__all__ = ["main"]


def main() -> int:
    """Console entry point: the exit status (0 ok, 2 bad input)."""
    from gpuplan.commands.jobview import fast_main

    status = fast_main(sys.argv[1:])
    if status is not None:
        return status
    from gpuplan import quickexit
    from gpuplan.cli import main as cli_main

    quickexit.opt_in()
    status = cli_main()
    quickexit.end_if_handed(status)  # a batch command's objects are not freed one by one
    return status


if __name__ == "__main__":
    sys.exit(main())
