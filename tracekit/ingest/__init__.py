"""Stage 1, ingest: trace files -> decoded XSpace -> frames -> :class:`~tracekit.ingest.trace.Trace`.

``paths`` finds and reads the files, ``wire`` (with the C ``wirec``) decodes them column by column, ``xspace``
reads plane and stat helpers, ``hlo``/``hloshape`` decode the HLO modules, ``frames`` builds the ops, steps and
host frames, ``trace`` joins them into a ``Trace``; ``inventory`` says what a trace holds; ``synth`` builds small
XSpaces for tests."""
