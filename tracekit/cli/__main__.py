from tracekit.cli.commands import main

main()
