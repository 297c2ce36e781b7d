"""Stage 3, analysis: ``intervals`` and ``timeline`` (busy, idle, gaps, steps, overlap), ``opstats`` (one row per
op), the rules engine (``rule_model``, ``rule_checks``, ``rules``) and ``diff`` between two traces."""
