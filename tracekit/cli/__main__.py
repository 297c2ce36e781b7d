from tracekit.cli.app import entry

entry()
