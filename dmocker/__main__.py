from dmocker.cli.main import entry

entry()
