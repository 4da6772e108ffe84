"""epi: offline document QA over archives far larger than a context window.

`from episodic_cli import Archive` is the Python API (episodic_cli/api.py, docs/usage.md "Python API"); it is
imported on first use, so that `import episodic_cli` (and the `epi` command) loads no more than it needs.
"""
__version__ = "0.1.0"

_API_NAMES = ("Archive", "Answer", "Quote", "SentenceEvidence", "Source", "Timings", "Hit", "Event", "Document",
              "Summary", "Outline", "OutlineNode", "IngestReport", "EpiError", "NotFound", "StoreError")


def __getattr__(name: str):
    if name in _API_NAMES:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'episodic_cli' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API_NAMES])
