"""What every atheris harness in this directory (``fuzz_*.py``) shares.

A harness is a script: ``python -m trials.fuzz.harnesses.fuzz_body [libFuzzer flags] [corpus dirs]``.
It imports the code under test inside ``atheris.instrument_imports()`` and hands its
test-one-input function to ``fuzz``, which adds three things to plain atheris:

- ``--write-seeds DIR`` writes the harness's seed inputs to DIR and exits (trials.fuzz
  seeds each corpus this way, so the seeds live beside the harness that reads them);
- a default ``-max_len`` per harness (libFuzzer's own default is 4096 bytes), and
  ``-len_control=0 -use_value_profile=1`` unless given;
- input size as coverage (``size_class``), so long inputs are kept in the corpus;
- a crash signature: the exception's type and the innermost frame in plantstore or in a
  harness, printed as ``FUZZ-CRASH-SIGNATURE: ...`` with the whole chained traceback just
  before atheris reports the crash.
  When ``PLANTSTORE_FUZZ_KNOWN`` lists a signature (one per line), an input that ends in it
  is not reported again. trials.fuzz uses this to keep fuzzing past a crash it has
  already recorded, so one run lists every distinct crash; a run with any crash still fails.
"""

from __future__ import annotations

import inspect
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import NoReturn, cast

# No stubs; and ``make test`` installs only the dev extra, where atheris may be missing.
import atheris  # type: ignore[import-untyped,import-not-found,unused-ignore]

KNOWN_VARIABLE = "PLANTSTORE_FUZZ_KNOWN"
SIGNATURE_MARK = "FUZZ-CRASH-SIGNATURE: "
_OUR_CODE = ("/plantstore/", "/trials/fuzz/")


class ServiceFault(AssertionError):
    """The service answered a fault of its own (a 500); ``__cause__`` is what it raised."""


class Violation(AssertionError):
    """A broken promise, with ``key`` naming its kind (say ``400 GET /docs/assets/*``), so
    the same failed check on different routes or statuses gets a signature of its own."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key


def signature(exc: BaseException) -> str:
    """``ValueError at plantstore/api/parsing.py:118 in parse_limit``: the same bug found
    through different inputs (or different harnesses) gets the same signature."""
    if isinstance(exc, ServiceFault) and exc.__cause__ is not None:
        exc = exc.__cause__
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [frame for frame in frames if any(part in frame.filename for part in _OUR_CODE)]
    if not (ours or frames):
        return type(exc).__name__
    frame = (ours or frames)[-1]
    filename = frame.filename
    for part in _OUR_CODE:
        if part in filename:
            filename = part.strip("/") + "/" + filename.split(part, 1)[1]
            break
    found = f"{type(exc).__name__} at {filename}:{frame.lineno} in {frame.name}"
    return f"{found} [{exc.key}]" if isinstance(exc, Violation) else found


@atheris.instrument_func  # type: ignore[untyped-decorator]
def size_class(size: int) -> int:
    """Input size as coverage: one branch per power of two, so that libFuzzer keeps an input
    for reaching a new size and not only new code. Long inputs are a class of bugs of their
    own (Python's int() refuses strings over 4,300 digits), yet they take the same branches
    in the code under test as short ones, so without this they would be dropped."""
    if size < 16:
        return 0
    if size < 64:
        return 1
    if size < 256:
        return 2
    if size < 1024:
        return 3
    if size < 2048:
        return 4
    if size < 4096:
        return 5
    if size < 6144:
        return 6
    return 7


def fuzz(
    test_one_input: Callable[[bytes], None],
    seeds: Sequence[bytes],
    max_len: int = 4096,
    setup: Callable[[], object] | None = None,
) -> NoReturn:
    """Run ``test_one_input`` under libFuzzer with this process's arguments, after
    ``setup`` (which ``--write-seeds`` skips)."""
    args = list(sys.argv)
    if "--write-seeds" in args:
        directory = Path(args[args.index("--write-seeds") + 1])
        directory.mkdir(parents=True, exist_ok=True)
        for number, seed in enumerate(seeds):
            (directory / f"seed-{number:03d}").write_bytes(seed)
        sys.exit(0)
    if setup is not None:
        setup()
    if not any(arg.startswith("-max_len=") for arg in args):
        args.append(f"-max_len={max_len}")
    if not any(arg.startswith("-len_control=") for arg in args):
        # Mutate up to -max_len from the start. libFuzzer otherwise caps mutations at the
        # longest seed and lets the cap grow slowly, so a seed at a length limit is shrunk
        # (same coverage, fewer bytes) before anything longer is ever tried.
        args.append("-len_control=0")
    if not any(arg.startswith("-use_value_profile=") for arg in args):
        args.append("-use_value_profile=1")  # how close a comparison came counts as coverage
    # The harness's own checks are branches worth covering too: instrument its functions.
    harness = sys.modules["__main__"]
    for value in list(vars(harness).values()):
        if inspect.isfunction(value) and value.__module__ == harness.__name__:
            atheris.instrument_func(value)
    known = frozenset(filter(None, os.environ.get(KNOWN_VARIABLE, "").splitlines()))

    @atheris.instrument_func  # type: ignore[untyped-decorator]
    def guarded(data: bytes) -> None:
        size_class(len(data))
        try:
            test_one_input(data)
        except Exception as exc:
            found = signature(exc)
            if found in known:
                return
            # atheris prints the last exception only; the chain holds the service's own.
            print(f"\n{SIGNATURE_MARK}{found}", file=sys.stderr)
            traceback.print_exception(exc, file=sys.stderr)
            sys.stderr.flush()
            raise

    atheris.Setup(args, guarded)
    atheris.Fuzz()
    sys.exit(0)  # atheris.Fuzz() does not return; this is for the type checker


def instrumented_imports(*packages: str) -> AbstractContextManager[object]:
    """``with instrumented_imports(): import plantstore...``: coverage for plantstore (and
    ``packages``) only, so the fuzzer's attention goes to the service, not the stdlib."""
    return cast(
        "AbstractContextManager[object]",
        atheris.instrument_imports(include=["plantstore", *packages]),
    )
