"""The entry of ``zerodoctor`` and ``python -m zerodoctor``: the CLI imported and run, a Ctrl-C meanwhile quiet.

Importing the CLI (Typer, Rich, pydantic, the plugins) takes a few hundred milliseconds; a Ctrl-C in that window
raised KeyboardInterrupt out of an import and printed its traceback. An interrupt before a command's own handling
exits as a shell expects of an interrupted command: status 130, nothing printed.
"""

import sys


def run() -> None:
    try:
        from zerodoctor.cli import main

        main()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    run()
