import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))  # tests/oracle.py

# A private compile cache per test session unless the caller chose one.
os.environ.setdefault("OPC_CACHE_DIR", tempfile.mkdtemp(prefix="opc-test-cache-"))


def pytest_addoption(parser):
    group = parser.getgroup("opc fuzzing")
    group.addoption("--fuzz-count", type=int, default=300,
                    help="mutants of tests/test_fuzz_cli.py (default 300; thousands for a long run)")
    group.addoption("--fuzz-seed", type=int, default=0, help="seed of the CLI mutation fuzzer (default 0)")
