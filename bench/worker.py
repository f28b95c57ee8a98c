"""One measurement in this (fresh) process: `python -m bench.worker '<json>'`.

The JSON names the system module (`bench.systems.<system>`), the function and
its keyword arguments. The last stdout line is `BENCH_RESULT <json>`: the
function's numbers plus this process's peak RSS and wall time.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time

RESULT_PREFIX = "BENCH_RESULT "


def main(argv) -> int:
    if len(argv) != 2:
        print("usage: python -m bench.worker '<json spec>'", file=sys.stderr)
        return 2
    spec = json.loads(argv[1])
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    start = time.perf_counter()
    module = importlib.import_module(f"bench.systems.{spec['system']}")
    result = getattr(module, spec["function"])(**spec.get("kwargs", {}))
    from bench.systems.common import peak_rss_mb

    result = dict(result, peak_rss_mb=peak_rss_mb(), wall_s=time.perf_counter() - start)
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
