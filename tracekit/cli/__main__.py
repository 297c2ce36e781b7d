import sys

try:
    from tracekit.cli.app import entry
except KeyboardInterrupt:  # Ctrl-C while the command line imports: one line and 130, as during a command
    sys.stderr.write("tracekit: interrupted\n")
    sys.exit(130)

entry()
