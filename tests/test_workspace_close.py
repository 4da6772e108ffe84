"""Closing a workspace frees the model's weights, not only its contexts (engine/workspace.py, Workspace.close):
`epi ingest` closes its reading workspace before another loads the same model for the blocks and the map, and two
copies were resident at the peak (docs/benchmarks.md, "Memory: epi ingest with its blocks and map"). The bundled
model, really loaded."""
from episodic_cli.engine.workspace import Workspace


def test_close_frees_the_weights_and_a_later_use_loads_them_again(tmp_path):
    ws = Workspace(store=str(tmp_path / "store"))
    first = ws.model
    tokens = first.tokenize("The tide turns at noon.")
    ws.close()
    assert first.ptr is None  # freed, not merely unreferenced
    again = ws.model
    assert again is not first and list(again.tokenize("The tide turns at noon.")) == list(tokens)
    ws.close()
