"""A while loop that does not end: bounded by `opc.max_trips`, and interruptible with Ctrl-C."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from cf_programs import forever

import opc


def test_max_trips_bounds_a_while():
    m = opc.compile(forever(max_trips=50))
    with pytest.raises(RuntimeError, match="max_trips of 50"):
        m.f(np.ones(4, np.float32))
    x = -np.ones(4, np.float32)  # the condition is false at once: no iteration
    np.testing.assert_array_equal(m.f(x), x)


def test_max_trips_allows_exactly_that_many():
    src = forever(max_trips=0)
    m = opc.compile(src)
    with pytest.raises(RuntimeError, match="max_trips"):
        m.f(np.ones(4, np.float32))
    np.testing.assert_array_equal(m.f(-np.ones(4, np.float32)), -np.ones(4, np.float32))


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_interrupts_a_while():
    """SIGINT while the loop runs: the call raises KeyboardInterrupt, and the process goes on
    (a second call works; Python's own handler still works after it)."""
    here = os.path.dirname(__file__)
    script = textwrap.dedent(f"""
        import sys, time, threading, os, signal
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a parent run in the background ignores it
        sys.path.insert(0, {here!r})
        import numpy as np
        import opc
        from cf_programs import forever
        m = opc.compile(forever())
        for attempt in range(2):
            threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
            t0 = time.time()
            try:
                m.f(np.ones(4, np.float32))
                print("returned")
            except KeyboardInterrupt:
                print("interrupted", round(time.time() - t0, 1))
        print(m.f(-np.ones(4, np.float32)).tolist())
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
        try:
            time.sleep(5)
        except KeyboardInterrupt:
            print("python still interruptible")
    """)
    env = dict(os.environ)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    lines = out.stdout.split("\n")
    assert out.returncode == 0, out.stderr[-2000:]
    assert [x.split()[0] for x in lines[:2]] == ["interrupted", "interrupted"], out.stdout
    assert lines[2] == "[-1.0, -1.0, -1.0, -1.0]"
    assert lines[3] == "python still interruptible"


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_ctrl_c_handled_before_a_call_does_not_end_its_loops():
    """opc's SIGINT handler is installed when the module loads (a Ctrl-C between a call's start and
    its first while is the while's); one that Python handled before the call (its KeyboardInterrupt
    caught) must not end the next call's loop."""
    here = os.path.dirname(__file__)
    script = textwrap.dedent(f"""
        import sys, time, os, signal
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a parent run in the background ignores it
        sys.path.insert(0, {here!r})
        import numpy as np
        import opc
        from cf_programs import forever
        m = opc.compile(forever(max_trips=5))
        print("handler installed", signal.getsignal(signal.SIGINT) is signal.default_int_handler)
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except KeyboardInterrupt:
            print("caught")
        print(m.f(-np.ones(4, np.float32)).tolist())
        try:
            m.f(np.ones(4, np.float32))
        except RuntimeError as err:
            print("bounded", "max_trips" in str(err))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.stdout.split("\n")[1:4] == ["caught", "[-1.0, -1.0, -1.0, -1.0]", "bounded True"], out.stdout + out.stderr
