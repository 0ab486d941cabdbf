"""Command-line edge of dmocker: one module per verb, wired up in :mod:`dmocker.cli.main`."""
