"""bench/answers/whole_heldout.py as it is, with its output (whole-TAG.json/.md) written into this folder: whole_heldout
writes to HERE/results/, so HERE is pointed at a folder whose `results` links here
(/work/heldout-stores/wh-here/results -> bench/results/model-size-answers; made if missing). Nothing else changes."""
import sys
from pathlib import Path

THIS = Path(__file__).resolve().parent
BENCH = THIS.parents[1]
sys.path.insert(0, str(BENCH))
import whole_heldout  # noqa: E402

here = Path("/work/heldout-stores/wh-here")
here.mkdir(parents=True, exist_ok=True)
if not (here / "results").exists():
    (here / "results").symlink_to(THIS)
whole_heldout.HERE = here
sys.exit(whole_heldout.main())
