"""The example that trains when no network is named: the digits net of ``examples/``.

With no ``--layer-def`` the command line trains this hybrid data/model
parallel net on the bundled 8x8 digits, long enough on two logical devices
to show the scheme at work.
"""

from __future__ import annotations

from pathlib import Path

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"
LAYER_DEF = EXAMPLES_DIR / "digits-hybrid.cfg"
LAYER_PARAMS = EXAMPLES_DIR / "digits-hybrid-params.cfg"
GPU = (0, 1)
EPOCHS = 30
