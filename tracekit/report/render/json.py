"""JSON: the report's versioned envelope, deterministic (sorted keys, no timestamps)."""
EXTENSIONS = (".json",)


def render(report, **_) -> str:
    return report.to_json()
