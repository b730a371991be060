"""`RouteError` and its variants: one class per C ABI status (`libroute_status`), plus `Closed`.

The native module raises these by name (`RouteError.NoEndpoints`, ...). The message, `detail`,
is the C ABI's one sentence naming the row, field, knob or worker, the same in every language.
"""

from ._native import ERROR_STATUSES


class RouteError(Exception):
    """Why a libroute call failed. Catch a variant (`RouteError.NoEndpoints`) or this base."""

    _code = None

    @property
    def detail(self) -> str:
        """What exactly was wrong: one sentence naming the row, field, knob or worker."""
        return self.args[0] if self.args else ""

    @property
    def code(self):
        """The `libroute_status` code (as in libroute.h); None for `Closed`."""
        return type(self)._code


def _variant(name, code, doc):
    attrs = {"__module__": "libroute", "__qualname__": f"RouteError.{name}", "__doc__": doc, "_code": code}
    setattr(RouteError, name, type(name, (RouteError,), attrs))


for _name, _code in ERROR_STATUSES:
    _variant(_name, _code, f"libroute_status {_code}.")
_variant("Closed", None, "The object was released (`release()`); it cannot be used any more.")
del _name, _code
RouteError.__module__ = "libroute"
