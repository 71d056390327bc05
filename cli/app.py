"""Placeholder app; the commands are registered in their own modules."""

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False)


def main() -> None:
    app()
