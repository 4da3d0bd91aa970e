"""What every `luminal` command shares: the consoles, the one-line failure, and the --url / --api-key options.

Commands give the options a default of None and pass them to `luminal.cli.config.connect`, which fills a missing
value from the config file that `luminal login` writes (flag > environment > config file > default).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

out = Console()
err = Console(stderr=True)

UrlOption = Annotated[
    str | None, typer.Option("--url", envvar="LUMINAL_URL", help="the platform's address [default: from login]")
]
KeyOption = Annotated[
    str | None, typer.Option("--api-key", envvar="LUMINAL_API_KEY", help="your API key [default: from login]")
]


def fail(message: str) -> NoReturn:
    # The message often quotes the server or the user (names, paths): escaped, so a '[' in it is not markup.
    err.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(1)


def print_table(columns: Sequence[str], rows: Iterable[Sequence[Any]], empty: str) -> None:
    """Rows as a table, or the one line `empty` when there are none. Cells are plain text: a name the server
    returns is never read as rich markup. None shows as '-'."""
    rows = list(rows)
    if not rows:
        out.print(empty, highlight=False)
        return
    table = Table(*columns, box=None, header_style="bold", pad_edge=False)
    for row in rows:
        table.add_row(*(Text("-" if cell is None else str(cell)) for cell in row))
    out.print(table)


def short_time(iso: str | None) -> str | None:
    """An API timestamp (ISO 8601, UTC) as 'YYYY-MM-DD HH:MM:SS' for tables."""
    return None if iso is None else iso[:19].replace("T", " ")
