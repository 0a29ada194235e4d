"""Test-wide set-up: test helper modules (plan_helpers, reference_model, ...) import by name."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
