"""The local stack invokes functions quietly (their EMF metric lines discarded) on threads
beside others that print (``serve``'s worker beside a command such as ``smoke``): only
the quiet thread's output is discarded, and the process's stdout is given back after."""

from __future__ import annotations

import sys
import threading

from timekeeper.local.stack import _quietly


def test_only_the_quiet_threads_output_is_discarded(capsys):
    before = sys.stdout
    inside, done = threading.Event(), threading.Event()

    def quiet_invocation() -> None:
        with _quietly():
            inside.set()
            while not done.is_set():
                print('{"_aws": "a metric line"}')

    worker = threading.Thread(target=quiet_invocation)
    worker.start()
    try:
        # When another thread prints while the invocation runs (it started before this did)
        assert inside.wait(60)
        out = sys.stdout
        for step in range(50):
            print(f"step {step} ok", file=out, flush=True)
    finally:
        done.set()
        worker.join(60)
    # Then every line of its own is kept, in order, and none of the invocation's
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"step {step} ok" for step in range(50)]
    # And the process's stdout is the one it had
    assert sys.stdout is before


def test_nested_and_overlapping_quiet_blocks_give_back_the_stream(capsys):
    before = sys.stdout
    first, second = _quietly(), _quietly()
    first.__enter__()
    second.__enter__()
    print("discarded")
    first.__exit__(None, None, None)
    assert sys.stdout is not before  # still one quiet block open
    second.__exit__(None, None, None)
    assert sys.stdout is before
    print("kept")
    assert capsys.readouterr().out == "kept\n"
