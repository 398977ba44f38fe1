"""One help text per command, in its module."""

import importlib

from torchdoctor.cli import COMMANDS, command_help, main


def test_each_commands_help_lives_in_its_module_only(capsys):
    """`torchdoctor --help` lists each command with its module's HELP, which is also its parser's
    description: one text per command (cli.py and four modules had drifted apart)."""
    assert main(["--help"]) == 0
    listing = capsys.readouterr().out
    for name in COMMANDS:
        module = importlib.import_module(f"torchdoctor.commands.{name}")
        assert module.HELP and command_help(name) == module.HELP and module.HELP in listing
        main([name, "--help"])  # the command's own --help opens with the same text
        assert " ".join(module.HELP.split()) in " ".join(capsys.readouterr().out.split())
