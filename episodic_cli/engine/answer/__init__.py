"""Answering from retrieved events: the shared records, text mode, kv mode, layered, short answers."""
