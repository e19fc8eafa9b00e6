import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))  # tests/oracle.py

# A private compile cache per test session unless the caller chose one.
os.environ.setdefault("OPC_CACHE_DIR", tempfile.mkdtemp(prefix="opc-test-cache-"))
