"""Upgrading stores written in the v1 format (one block file per event)."""
