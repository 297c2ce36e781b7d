"""tracekit's version, as ``tracekit.__version__`` and every report envelope state it (kept apart from
``tracekit/__init__.py`` so that the stages never import the package's lazy public face)."""
__version__ = "0.1.0"
