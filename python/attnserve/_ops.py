"""The Python face of the ops: argument checks that the C++ core cannot make, and clear errors.

Each op of the extension is wrapped so that
  - ml_dtypes bf16 / fp8 NumPy arrays (which NumPy cannot export through DLPack) reach the core with
    their dtype, and PyTorch fp8 tensors travel as uint8 views;
  - an immutable array passed as an output (a JAX array; a read-only NumPy array) is refused with an
    attnserve.Error naming the argument instead of being written in place or failing opaquely;
  - a call nanobind cannot convert (wrong type, read-only output, unsupported dtype) raises an
    attnserve.Error naming the argument, not nanobind's generic "incompatible function arguments";
  - on GPU arrays the op runs on the caller's current PyTorch / CuPy stream unless stream= is given.
Which arguments are arrays and which are outputs is read from the extension's own signatures
(outputs are the arrays bound writable), so no table here can drift from the C++ bindings.
The stateful classes' methods (planners, allocator, pools) get the same error handling (wrap_method).
"""
from __future__ import annotations

import functools
import re

from . import _attnserve
from ._frameworks import as_dlpack_compatible, current_stream

Error = _attnserve.Error


class OpSignature:
    """Parameter names, kinds and types of one extension function, parsed from __nb_signature__."""

    def __init__(self, fn):
        text = fn.__nb_signature__[0][0]
        params = text[text.index("(") + 1:text.rindex(") ->")]
        self.positional: list[str] = []  # may be passed by position (before the bare '*')
        self.types: dict[str, str] = {}
        self.required: set[str] = set()
        keyword_only = False
        for p in params.split(", "):
            if p == "*":
                keyword_only = True
                continue
            name, _, rest = p.partition(": ")
            typ, _, default = rest.partition(" = ")
            self.types[name] = typ
            if not default:
                self.required.add(name)
            if not keyword_only:
                self.positional.append(name)
        self.arrays = {n for n, t in self.types.items() if t.startswith("ndarray[")}
        self.outputs = {n for n in self.arrays if "writable=False" not in self.types[n]}

    def bind(self, op: str, args, kwargs) -> dict:
        if len(args) > len(self.positional):
            raise Error(f"{op}: takes {len(self.positional)} positional arguments "
                        f"({', '.join(self.positional)}), got {len(args)}; pass the rest by keyword")
        bound = dict(zip(self.positional, args))
        for k, v in kwargs.items():
            if k in bound:
                raise Error(f"{op}: argument '{k}' given twice (by position and by keyword)")
            if k not in self.types:
                raise Error(f"{op}: unknown argument '{k}' (arguments: {', '.join(self.types)})")
            bound[k] = v
        return bound


def _is_jax_array(a) -> bool:
    return type(a).__module__.split(".")[0] in ("jax", "jaxlib")


def _check_outputs_mutable(op: str, sig: OpSignature, bound: dict) -> None:
    for name in sig.outputs:
        a = bound.get(name)
        if a is None:
            continue
        if _is_jax_array(a):
            raise Error(f"{op}: argument '{name}' is a JAX array, which is immutable: attnserve writes outputs in "
                        f"place, so pass a writable array (NumPy, PyTorch, CuPy) and convert the result")
        flags = getattr(a, "flags", None)
        if flags is not None and getattr(flags, "writeable", True) is False:
            raise Error(f"{op}: argument '{name}' is a read-only array: attnserve writes outputs in place "
                        f"(copy it with np.array(x) or np.require(x, requirements='W'))")


def _describe(a) -> str:
    t = type(a)
    return f"{t.__module__}.{t.__qualname__}" if t.__module__ != "builtins" else t.__qualname__


def _diagnose(op: str, sig: OpSignature, bound: dict, original: Exception) -> Error:
    """The first argument the call could not take, named, with what was expected."""
    for name in sig.types:
        if name in sig.required and bound.get(name) is None:
            return Error(f"{op}: argument '{name}' is required" + (" (got None)" if name in bound else ""))
    for name in sig.types:
        if name not in bound:
            continue
        a, typ = bound[name], sig.types[name]
        if a is None:
            if not typ.endswith("| None"):
                return Error(f"{op}: argument '{name}' must be {typ}, got None")
            continue
        if name in sig.arrays:
            probe = _attnserve._probe_output if name in sig.outputs else _attnserve._probe_input
            try:
                _attnserve._probe_input(a)
            except TypeError:
                return Error(f"{op}: argument '{name}' must be an array (NumPy, PyTorch, JAX, CuPy: anything with "
                             f"__dlpack__ or the buffer protocol), got {_describe(a)}")
            except Error as e:
                return Error(f"{op}: argument '{name}': {str(e).removeprefix('attnserve: ')}")
            try:
                probe(a)
            except TypeError:
                return Error(f"{op}: argument '{name}' is a read-only array, but it is an output (written in place)")
            continue
        expected = {"int": (int,), "float": (int, float), "bool": (bool,)}.get(typ.split(" ")[0])
        if expected is not None:
            numeric_ok = typ != "bool" and hasattr(a, "__index__" if typ == "int" else "__float__")
            if not (isinstance(a, expected) or numeric_ok) or (typ != "bool" and isinstance(a, bool)):
                return Error(f"{op}: argument '{name}' must be {typ}, got {_describe(a)} ({a!r})")
            if typ == "int" and name == "stream" and not 0 <= int(a) < 2 ** 64:
                return Error(f"{op}: argument 'stream' must be a raw cudaStream_t handle (an int >= 0), got {a!r}")
            if typ == "int" and name != "stream" and not -2 ** 31 <= int(a) < 2 ** 31:
                return Error(f"{op}: argument '{name}' = {a!r} does not fit in a 32-bit int")
        elif typ.startswith("collections.abc.Sequence[int]"):
            try:
                items = list(a)
            except TypeError:
                return Error(f"{op}: argument '{name}' must be a sequence of ints, got {_describe(a)}")
            bad = next((i for i, x in enumerate(items) if not hasattr(x, "__index__") or isinstance(x, bool)), None)
            if bad is not None:
                return Error(f"{op}: argument '{name}'[{bad}] must be an int, got {_describe(items[bad])} "
                             f"({items[bad]!r})")
            big = next((i for i, x in enumerate(items) if not -2 ** 31 <= int(x) < 2 ** 31), None)
            if big is not None:
                return Error(f"{op}: argument '{name}'[{big}] = {items[big]} does not fit in a 32-bit int")
        elif typ == "str":
            if not isinstance(a, str):
                return Error(f"{op}: argument '{name}' must be str, got {_describe(a)} ({a!r})")
        elif typ.startswith("attnserve."):
            cls = getattr(_attnserve, typ.rsplit(".", 1)[1], None)
            if cls is not None and not isinstance(a, cls):
                return Error(f"{op}: argument '{name}' must be attnserve.{cls.__name__}, got {_describe(a)} ({a!r})")
    return Error(f"{op}: {original}")


_SUPPORT_ERRORS = re.compile(r"^attnserve: (unsupported array|arrays of at most|vector dtypes)")


def wrap(fn):
    """The public op for extension function `fn` (see the module docstring)."""
    op = fn.__name__
    sig = OpSignature(fn)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        bound = sig.bind(op, args, kwargs)
        _check_outputs_mutable(op, sig, bound)
        conv = {k: (as_dlpack_compatible(v) if k in sig.arrays else v) for k, v in bound.items()}
        if "stream" in sig.types and conv.get("stream") is None:
            conv["stream"] = current_stream([conv[k] for k in sig.arrays if k in conv])
        if hasattr(conv.get("stream"), "__index__"):
            conv["stream"] = int(conv["stream"])  # NumPy ints, framework handles
        try:
            return fn(**conv)
        except TypeError as e:
            if "incompatible function arguments" not in str(e):
                raise
            raise _diagnose(op, sig, conv, e) from None
        except Error as e:
            if not _SUPPORT_ERRORS.match(str(e)):
                raise
            raise _diagnose(op, sig, conv, e) from None

    return call


def wrap_method(cls, name: str) -> None:
    """Replaces cls.name (a method of an extension class) with one whose conversion failures raise
    attnserve.Error naming the argument, like the ops (no dtype re-typing: these take host values)."""
    fn = getattr(cls, name)
    op = f"{cls.__name__}.{name}" if name != "__init__" else cls.__name__
    sig = OpSignature(fn)

    @functools.wraps(fn)
    def call(self, *args, **kwargs):
        bound = sig.bind(op, (self,) + args, kwargs)
        bound.pop("self")
        conv = {k: (as_dlpack_compatible(v) if k in sig.arrays else v) for k, v in bound.items()}
        try:
            return fn(self, **conv)
        except TypeError as e:
            if "incompatible function arguments" not in str(e):
                raise
            raise _diagnose(op, sig, {"self": self, **conv}, e) from None
        except Error as e:
            if not _SUPPORT_ERRORS.match(str(e)):
                raise
            raise _diagnose(op, sig, {"self": self, **conv}, e) from None

    setattr(cls, name, call)


__all__ = ["wrap", "wrap_method", "OpSignature"]
