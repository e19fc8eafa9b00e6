import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "support"))  # tests/support/oracle.py and the other helpers

# A private compile cache per test session unless the caller chose one.
os.environ.setdefault("OPC_CACHE_DIR", tempfile.mkdtemp(prefix="opc-test-cache-"))


def pytest_addoption(parser):
    group = parser.getgroup("opc fuzzing")
    group.addoption("--full-cast-grid", action="store_true",
                    help="test_results: every cast pair at every trip count 1..17 (CI: a reduced set)")
    group.addoption("--fuzz-count", type=int, default=None,
                    help="fuzz tests: mutants of test_fuzz_cli (default 300), random programs of "
                         "test_fuzz_programs and ONNX graphs of test_fuzz_onnx (default: each test's CI size); "
                         "thousands for a long run")
    group.addoption("--fuzz-seed", type=int, default=0, help="fuzz tests: the first seed (default 0)")
