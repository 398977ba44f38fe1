"""The GPU check lives in benchmarks/gpucheck/ and imports itself as `benchmarks.gpucheck`:
the repository root must be importable, as it is when dev.py runs it."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
