"""Step replay: a measured step as a dependency graph per device, replayed with measured or changed op times
(``tracekit whatif``; findings' savings along the critical path). :mod:`.graph` builds one host's graph (the map
side), :mod:`.engine` joins the hosts at their collectives and evaluates (the reduce side), :mod:`.changes` turns
a what-if question into op times, :mod:`.whatif` puts them together."""
