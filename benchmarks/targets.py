"""Issue 18's targets from two runs side by side: ``benchmarks/results/targets.md``.

    python -m benchmarks.targets NOHUGE.json HUGE.json   # the JSON of `make bench-nohuge` / `make bench`
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from credax.bench.report import targets_markdown

OUT = Path(__file__).resolve().parent / "results" / "targets.md"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        raise SystemExit(__doc__)
    runs = {"no glibc tunables (default)": json.loads(Path(argv[0]).read_text()),
            "huge pages (glibc.malloc.hugetlb=1)": json.loads(Path(argv[1]).read_text())}
    OUT.write_text(targets_markdown(runs))
    print(OUT.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
