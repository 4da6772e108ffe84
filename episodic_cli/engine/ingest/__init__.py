"""The ingest pipeline: the document pass, surprise segmentation, code cuts, checkpoints, token streams."""
