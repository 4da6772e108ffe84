"""epi: offline document QA over archives far larger than a context window."""
__version__ = "0.1.0"
