"""Round 39's playback-frame harness, now frames40/frames_cpu.py (the same SPECs, and
kv-outer, causal and dtype words besides): run that one, with the same arguments."""

import runpy
import sys
from pathlib import Path

if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    sys.argv[0] = str(here.parent / "frames40" / "frames_cpu.py")
    runpy.run_path(sys.argv[0], run_name="__main__")
