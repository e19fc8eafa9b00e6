"""Targets: what a target is (`target.py`: a name, a backend, a kernel list, a device's own
kernels), a device's kernels (`device_kernels.py`: the `[external.OP]` sections of its .toml)
and how an op runs there (`routing.py`)."""
