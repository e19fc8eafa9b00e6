"""OpcError in a module of its own, which imports nothing: loading a compiled module from the
cache (opc/compile_cache.py) must not import xDSL. opc.ir re-exports it."""


class OpcError(Exception):
    """An error meant for the user: printed as one line, no traceback."""
