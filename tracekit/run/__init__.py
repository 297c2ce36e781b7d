"""Where the pipeline runs: ``capture`` (a script, a function or a remote job under the profiler), ``hook`` (inside a
training job, never breaking it), ``hosts`` (many hosts on processes or Dask), ``alloc`` (the CLI's allocator
tuning) and ``xprof`` (xprof's own analyses, for comparisons)."""
