"""The sentence embedder and its numpy question encoder."""
