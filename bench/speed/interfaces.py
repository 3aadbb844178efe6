"""What the server interface costs a request: the bare reference app over ASGI and over RSGI,
under the same granian and event loop, each alone on CPU 0 with wrk on CPU 1, in interleaved
rounds. The difference in µs a request is the most that serving the hot routes over RSGI could
save, since both apps do nothing else.

    .venv/bin/python -m bench.speed.interfaces [--rounds 3] [--seconds 8] [--loop uvloop]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from bench.lib.measure import LIST_10, Options, wait_for_quiet
from bench.lib.services import REFERENCE_APPS, start_reference
from bench.lib.wrk import run_wrk


def rate(interface: str, options: Options) -> float:
    """One run of list 10 against the reference app served over ``interface``."""
    wait_for_quiet([0, 1])
    server = start_reference(options, "none", interface)
    try:
        return run_wrk(
            server.base_url + LIST_10,
            server.token,
            options.seconds,
            options.connections,
            options.wrk_cpus,
            None,
        ).good_rate
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.speed.interfaces", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--loop", default="uvloop", choices=["uvloop", "asyncio"])
    args = parser.parse_args()
    rates: dict[str, list[float]] = {name: [] for name in REFERENCE_APPS}
    with tempfile.TemporaryDirectory() as workdir:
        options = Options(args.seconds, 32, "0", "1", Path(workdir), reference_loop=args.loop)
        for round_number in range(1, args.rounds + 1):
            for interface in REFERENCE_APPS:
                rates[interface].append(rate(interface, options))
                print(f"round {round_number}, {interface}: {rates[interface][-1]:,.0f}/s")
    asgi, rsgi = (statistics.median(rates[name]) for name in REFERENCE_APPS)
    ratios = [r / a for a, r in zip(rates["asgi"], rates["rsgi"], strict=True)]
    print(
        f"median: ASGI {asgi:,.0f}/s ({1e6 / asgi:.1f} µs a request), RSGI {rsgi:,.0f}/s "
        f"({1e6 / rsgi:.1f} µs); RSGI / ASGI {statistics.median(ratios):.2f}x "
        f"[{min(ratios):.2f}-{max(ratios):.2f}], {1e6 / asgi - 1e6 / rsgi:.1f} µs a request"
    )


if __name__ == "__main__":
    main()
