"""Before Qt opens a window on X11: is the display reachable, are the xcb plugin's libraries there?

Qt's xcb plugin aborts the process (SIGABRT) when either fails, after a message that
blames libxcb-cursor0 whichever library is missing. These checks load the same shared
libraries with ctypes and ask the X server for a connection, so the app can say what
is wrong in one sentence instead. No Qt here.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

# The xcb platform plugin's libraries (Qt 6.10) and the Debian packages that ship them.
XCB_LIBRARIES = {
    "xcb": "libxcb1",
    "xcb-cursor": "libxcb-cursor0",
    "xcb-icccm": "libxcb-icccm4",
    "xcb-keysyms": "libxcb-keysyms1",
    "xcb-image": "libxcb-image0",
    "xcb-render-util": "libxcb-render-util0",
    "xcb-randr": "libxcb-randr0",
    "xcb-shape": "libxcb-shape0",
    "xcb-xkb": "libxcb-xkb1",
    "xkbcommon-x11": "libxkbcommon-x11-0",
}


def missing_packages(find=ctypes.util.find_library) -> list[str]:
    """The Debian packages of the xcb plugin's libraries that cannot be found."""
    return [pkg for lib, pkg in XCB_LIBRARIES.items() if find(lib) is None]


def display_reachable(display: str) -> bool:
    """Whether an X server answers at `display` (libxcb's own connection test)."""
    lib = ctypes.util.find_library("xcb")
    if lib is None:
        return False
    xcb = ctypes.CDLL(lib)
    xcb.xcb_connect.restype = ctypes.c_void_p
    xcb.xcb_connect.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    xcb.xcb_connection_has_error.argtypes = [ctypes.c_void_p]
    xcb.xcb_disconnect.argtypes = [ctypes.c_void_p]
    conn = xcb.xcb_connect(display.encode(), None)
    try:
        return conn is not None and xcb.xcb_connection_has_error(conn) == 0
    finally:
        if conn is not None:
            xcb.xcb_disconnect(conn)


def x11_problem() -> str | None:
    """One sentence saying why no window can open on X11, or None (not X11, or fine)."""
    display = os.environ.get("DISPLAY")
    platform = os.environ.get("QT_QPA_PLATFORM", "")
    if not display or (platform and not platform.startswith("xcb")):
        return None
    if os.environ.get("WAYLAND_DISPLAY") and not platform:
        return None  # Qt prefers Wayland there
    missing = missing_packages()
    if missing:
        return (
            "the window needs these X11 libraries, which are not installed: "
            f"{', '.join(missing)} (Debian/Ubuntu: apt-get install {' '.join(missing)})."
        )
    if not display_reachable(display):
        return (
            f"no X display answers at DISPLAY={display}; start one (or ssh -X), or use "
            "--screenshot or `flash-explorer export` for headless output."
        )
    return None
