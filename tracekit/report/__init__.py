"""Stage 4, report: ``envelope`` builds the one :class:`Report` every renderer reads; ``render`` holds the
renderers (text, JSON, Markdown, HTML, SARIF); ``rulesdoc`` generates ``docs/rules.md``."""
