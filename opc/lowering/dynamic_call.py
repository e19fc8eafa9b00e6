"""Calling a compiled function with run-time (`?`) sizes: the sizes are read off the
arguments, checked against one another before any kernel runs, and passed to the C
function after its outputs; the results are allocated at the sizes they come to.

A `?` dim of an argument is a size symbol (n0, n1, ...) or a polynomial of them
(opc/symbolic.py). The first argument dim that gives a symbol binds it; every other dim of
that symbol must be the same size, else a ValueError names both arguments and both sizes.

A size computed from the data (a nonzero's count, `sig.found`) is known only after the call:
its results are allocated at its upper bound, the C function writes them contiguously at their
run-time shape and returns the sizes in its last output, and the results are cut to them.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from opc.errors import UnsupportedError
from opc.lowering.build import CompiledFunction, byte_size, freeze_while_alive
from opc.symbolic import evaluate, evaluate_derived

SYMBOL = re.compile(r"^n\d+$")


def shape_text(shape: Sequence[int | str]) -> str:
    dims = ", ".join(str(d) if isinstance(d, int) else "?" for d in shape)
    return f"({dims},)" if len(shape) == 1 else f"({dims})"


class DynamicFunction(CompiledFunction):
    """A compiled function whose C code takes its sizes as arguments: one compile, any size."""

    release: Callable | None = None  # the module's free() of the results it hands out (abi.RELEASE_FN)

    def shape_fits(self, i: int, shape: tuple[int, ...]) -> bool:
        want = self.sig.inputs[i][1]
        return len(shape) == len(want) and all(not isinstance(w, int) or w == g for w, g in zip(want, shape))

    def shape_text(self, i: int) -> str:
        return shape_text(self.sig.inputs[i][1])

    @functools.cached_property
    def run_time_dims(self) -> list[list[tuple[int, str, bool]]]:
        """Per argument, its run-time dims: (dim, size text, whether it is a lone symbol)."""
        return [[(d, w, bool(SYMBOL.match(w))) for d, w in enumerate(want) if not isinstance(w, int)]
                for _, want, _ in self.sig.inputs]

    def bind(self, shapes: Sequence[tuple[int, ...]]) -> dict[str, int]:
        """The size symbols' values, read off the arguments' shapes and checked."""
        sizes: dict[str, int] = {}
        given: dict[str, str] = {}
        later: list[tuple[str, int, str, int]] = []
        for (name, _, _), dims, shape in zip(self.sig.inputs, self.run_time_dims, shapes):
            for d, w, symbol in dims:
                got = shape[d]
                if not symbol:
                    later.append((name, d, w, got))
                elif w in sizes and sizes[w] != got:
                    raise ValueError(f"{self.sig.name}(): argument '{name}' has size {got} at dim {d}, but "
                                     f"{given[w]} is {sizes[w]}: they must be equal")
                else:
                    sizes.setdefault(w, got)
                    given.setdefault(w, f"argument '{name}' dim {d}")
        evaluate_derived(self.sig.derived, sizes)  # (a clamped slice bound: computed, never read off an argument)
        for name, d, w, got in later:
            need = evaluate(w, sizes)
            if need != got:
                raise ValueError(f"{self.sig.name}(): argument '{name}' has size {got} at dim {d}, where the "
                                 f"other arguments make it {need} ({w})")
        for lhs, rhs, what in self.sig.checks:
            a, b = evaluate(lhs, sizes), evaluate(rhs, sizes)
            if a != b:
                raise ValueError(f"{self.sig.name}(): sizes that must be equal differ ({what}): {a} and {b} "
                                 f"(from {self.describe(sizes)})")
        return sizes

    def describe(self, sizes: dict[str, int]) -> str:
        return ", ".join(f"{n}={v}" for n, v in sizes.items())

    def __call__(self, *args, **kwargs):
        if kwargs:
            args = self.by_name(args, kwargs)
        if len(args) != len(self.sig.inputs):
            names = ", ".join(n for n, _, _ in self.sig.inputs)
            raise TypeError(f"{self.sig.name}() takes {len(self.sig.inputs)} arguments ({names}), got {len(args)}")
        return self.run_arrays([self.check(i, a) for i, a in enumerate(args)])

    def with_last(self, last: Sequence, frozen: bool = False) -> Callable:
        """As CompiledFunction's: `last` (a loaded model's weights) checked and made into C pointers once."""
        n_first = len(self.sig.inputs) - len(last)
        fixed = [self.check(n_first + i, a) for i, a in enumerate(last)]
        fixed_ptrs = self.array_pointers(fixed, n_first)

        def call(*first):  # noqa: ANN002, ANN202
            if len(first) != n_first:
                return self(*first, *last)
            return self.run_arrays([self.check(i, a) for i, a in enumerate(first)] + fixed, fixed_ptrs)

        if frozen:
            freeze_while_alive(call, fixed, self.freeze)
        return call

    def array_pointers(self, arrays: Sequence[np.ndarray], offset: int = 0) -> list:
        from_buffer = self.ffi.from_buffer
        return [from_buffer(ctype, arr if storage is None else arr.view(storage))
                for arr, (ctype, _, _, storage) in zip(arrays, self.in_spec[offset:])]

    def run_arrays(self, arrays: list[np.ndarray], fixed_ptrs: list | None = None):  # noqa: ANN201
        """Call on the checked arrays; fixed_ptrs: the pointers of the last ones, made before."""
        sizes = self.bind([a.shape for a in arrays])
        from_buffer = self.ffi.from_buffer
        first = arrays if fixed_ptrs is None else arrays[:len(arrays) - len(fixed_ptrs)]
        ptrs = self.array_pointers(first) + (fixed_ptrs or [])
        bounds = dict(sizes)
        for name, bound in self.sig.found:  # each bound is over the argument sizes ("?": the function allocates)
            if bound != "?":
                bounds[name] = evaluate(bound, sizes)
        outs = []
        for i, ((shape, _), (_, dtype, ctype, storage)) in enumerate(zip(self.sig.outputs, self.out_c)):
            if i in self.sig.handed:  # the function allocates it and writes its address here
                handle = np.zeros(1, np.int64)
                outs.append(handle)
                ptrs.append(from_buffer("int64_t[]", handle, require_writable=True))
                continue
            dims = tuple(evaluate(d, bounds) for d in shape)
            if any(n < 0 for n in dims):
                raise ValueError(f"{self.sig.name}(): result #{i} would have shape {list(dims)} "
                                 f"({list(shape)} at {self.describe(sizes)}): a size computed from the "
                                 "arguments' is negative")
            try:
                out = self.empty(dims, dtype)
            except MemoryError:
                n = int(np.prod(dims, dtype=object)) * dtype.itemsize
                raise MemoryError(f"{self.sig.name}(): out of memory: result #{i} ({dtype}{list(dims)}, "
                                  f"{byte_size(n)}) could not be allocated") from None
            outs.append(out)
            ptrs.append(from_buffer(ctype, out if storage is None else out.view(storage), require_writable=True))
        status = self.cfunc(*ptrs, *(sizes[n] for n in self.sig.sizes))
        if status != 0:
            raise self.error(status)
        if self.sig.found:
            outs = self.cut(outs, sizes)
        if self.wrap is not None:
            outs = [self.wrap(o) for o in outs]
        return outs[0] if len(outs) == 1 else tuple(outs)


    def cut(self, outs: list[np.ndarray], sizes: dict[str, int]) -> list[np.ndarray]:
        """The results at the data sizes the call found (its last output): each a view of the front of
        its bound-sized buffer, where the C code wrote it contiguously."""
        found = outs.pop()
        actual = dict(sizes)
        actual.update((name, int(n)) for (name, _), n in zip(self.sig.found, found))
        cut = []
        for i, (out, (shape, _)) in enumerate(zip(outs, self.sig.outputs)):
            dims = tuple(evaluate(d, actual) for d in shape)
            if i in self.sig.handed:
                cut.append(self.handed_array(int(out[0]), dims, self.out_c[i][1]))
            else:
                cut.append(out if dims == out.shape else out.reshape(-1)[:int(np.prod(dims))].reshape(dims))
        return cut

    def handed_array(self, address: int, dims: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """The result the C function allocated at `address`, as an array of dims that frees it when
        the last view of it goes (cffi's gc on the pointer the buffer keeps alive)."""
        n = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
        ptr = self.ffi.gc(self.ffi.cast("char *", address), self.release)
        if n == 0:
            return np.empty(dims, dtype)
        data = np.frombuffer(self.ffi.buffer(ptr, n), dtype=np.uint8)
        return data.view(dtype).reshape(dims)


def results_of(sig) -> list[tuple[tuple[int | str, ...], str]]:  # noqa: ANN001  (a FunctionSignature)
    """The function's results (shape, dtype): its outputs but the last where that one holds the data
    sizes the call found (sig.found), which the call cuts the results to and does not return."""
    return sig.outputs[:-1] if sig.found else sig.outputs


def result_shapes(sig, shapes: Sequence[Sequence], found: Mapping | None = None) -> list[tuple]:  # noqa: ANN001
    """The results' shapes for arguments of `shapes`: numbers, or a framework's symbolic sizes at
    trace time (torch's SymInt: the sizes' + and * are all this needs). Unchecked: the call checks.
    A size the call computes from the data (sig.found) is known only after the call: `found` gives
    one for each (torch's unbacked SymInts), else this says so in one line."""
    if sig.found and found is None:
        names = ", ".join(n for n, _ in sig.found)
        raise UnsupportedError(f"{sig.name}(): its results' sizes depend on the data ({names}), known only after "
                               "the call: no shape to give a tracer before it (call it eagerly)")
    sizes: dict = {}
    for (_, want, _), shape in zip(sig.inputs, shapes):
        for w, got in zip(want, shape):
            if isinstance(w, str) and SYMBOL.match(w):
                sizes.setdefault(w, got)
    evaluate_derived(sig.derived, sizes)
    sizes.update(found or {})
    return [tuple(evaluate(d, sizes) for d in shape) for shape, _ in results_of(sig)]

