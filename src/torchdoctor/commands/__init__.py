"""One module per subcommand, each with `main(argv) -> int` (see the table in `cli.py`).

Commands parse arguments with `CommandParser`, call into the pipeline and print; errors are
raised as `TorchdoctorError`s and turned into exit codes by `cli.main` alone.
"""
