"""Benchmark: time to export 100 frames at 1280×720 as GIF and as MP4, headless.

Run: `python -m desktop.cli.bench_export [--json assets/benchmarks/export.json]`. Frames
are drawn by the lanes' own painters (both lanes laid out for 1280x720, the reference
example, 25 steps held 4 frames each), so this measures rendering plus encoding, as a
user's export does.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    import PySide6

    from desktop.cli.session import headless_window
    from desktop.export.exporter import export_animation
    from desktop.export.frames import FramePlan
    from desktop.state.config import Config

    window = headless_window(Config())
    plan = FramePlan(range(25), 4)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for suffix in ("gif", "mp4"):
            runs = []
            for _ in range(args.repeats):
                path = Path(tmp) / f"bench.{suffix}"
                t0 = time.perf_counter()
                export_animation(window, path, plan=plan, fps=10, target="both", size=(1280, 720))
                runs.append(time.perf_counter() - t0)
            results[suffix] = {
                "frames": len(plan),
                "size": "1280x720",
                "median_s": statistics.median(runs),
                "runs_s": runs,
                "bytes": path.stat().st_size,
            }
    window.close()
    print(f"{'format':<8}{'frames':>8}{'size':>11}{'median (s)':>12}{'file (KiB)':>12}")
    for name, r in results.items():
        print(
            f"{name:<8}{r['frames']:>8}{r['size']:>11}{r['median_s']:>12.2f}{r['bytes'] / 1024:>12.0f}"
        )
    if args.json:
        report = {
            "command": "python -m desktop.cli.bench_export --json assets/benchmarks/export.json",
            "machine": {
                "python": platform.python_version(),
                "pyside6": PySide6.__version__,
                "cpus": os.cpu_count(),
                "platform": os.environ.get("QT_QPA_PLATFORM"),
            },
            "results": results,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        from desktop.export.atomic import write_text_atomic

        write_text_atomic(args.json, json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
