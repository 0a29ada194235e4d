"""One object made on first use and shared by every thread, which a test can swap for
a stand-in inside a block: the seam through which the CUDA overrides run on the host
(:mod:`convnet.kernels.cuda.kernel_set`, :mod:`convnet.kernels.cuda.cudnn_conv`)."""

from __future__ import annotations

import contextlib
import threading
from typing import Callable, Generic, Iterator, TypeVar

T = TypeVar("T")


class Swappable(Generic[T]):
    """``make()``'s result, made once (under a lock: the logical devices' threads may
    ask at the same moment), unless :meth:`swapped` put a stand-in in its place."""

    def __init__(self, make: Callable[[], T]):
        self._make = make
        self._value: T | None = None
        self._lock = threading.Lock()

    def get(self) -> T:
        if self._value is None:
            with self._lock:
                if self._value is None:
                    self._value = self._make()
        return self._value

    @contextlib.contextmanager
    def swapped(self, stand_in: T) -> Iterator[T]:
        """``stand_in`` in place of the shared object inside the block."""
        with self._lock:
            saved, self._value = self._value, stand_in
        try:
            yield stand_in
        finally:
            with self._lock:
                self._value = saved
