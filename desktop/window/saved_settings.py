"""Read QSettings values defensively: a corrupt or hand-edited value never stops the app.

Every stored value is parsed and range-checked; a bad one falls back to its default
with one line on stderr, naming the key, the bad value and the default used.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def warn(text: str) -> None:
    print(f"flash-explorer: warning: {text}", file=sys.stderr)


def read_value(settings, key: str, parse: Callable[[object], T], default: T) -> T:
    """settings[key] through `parse` (raising on bad input), or `default` with one line."""
    try:
        raw = settings.value(key)
    except Exception:  # noqa: BLE001 (Qt may fail to decode a corrupt value)
        raw = "<unreadable>"
    if raw is None:
        return default
    try:
        return parse(raw)
    except (TypeError, ValueError, OverflowError, AttributeError, RecursionError):
        warn(f"the saved setting {key}={raw!r} is not valid; using {default!r}")
        return default


def _scalar(raw: object) -> str:
    # QSettings hands back "1, 2" from an INI file as a list; that is not a number.
    if isinstance(raw, (list, tuple, dict)):
        raise TypeError
    return str(raw).strip()


def parse_row(raw: object) -> int:
    row = int(_scalar(raw))
    if row < 0:
        raise ValueError
    return row


def parse_speed(raw: object) -> float:
    speed = float(_scalar(raw))
    if not (math.isfinite(speed) and 0 < speed <= 1000):
        raise ValueError
    return speed


def parse_theme(raw: object) -> str:
    from desktop.theme import THEMES

    theme = _scalar(raw)
    if theme not in THEMES:
        raise ValueError
    return theme


def parse_config_json(raw: object):
    """The saved Config: JSON text of a mapping; bad fields fall back one by one."""
    from desktop.state.config import Config

    data = json.loads(_scalar(raw))
    config = Config.from_dict(data, warn=warn)
    if widget_range_problem(config):
        raise ValueError
    return config


# The window's spin boxes hold C ints: a larger value (the ledger takes up to 10^12)
# would stop show_config part-way, leaving controls and lanes on different configs.
WIDGET_MAX = 2**31 - 1
WIDGET_FIELDS = ("n", "n_keys", "d", "dv", "block_q", "block_k", "sram", "seed")


def widget_range_problem(config) -> str | None:
    """One sentence if a field of `config` is larger than the window's controls hold."""
    for name in WIDGET_FIELDS:
        value = getattr(config, name, None)
        if value is not None and value > WIDGET_MAX:
            return (
                f"--{name.replace('_', '-')} {value:,} is more than the window's controls hold "
                f"(at most {WIDGET_MAX:,}); use `flash-explorer ledger` for larger values."
            )
    return None


_save_warned = False


def check_saved(settings) -> None:
    """Write `settings` out now; if that fails (a read-only folder, a full disk), say so
    once per session, since the next launch will not find this one's settings."""
    global _save_warned
    settings.sync()
    if settings.status() != type(settings).Status.NoError and not _save_warned:
        _save_warned = True
        warn(
            f"the settings could not be saved to {settings.fileName()}; make that folder "
            "writable to keep them for the next launch"
        )


def parse_bytes(raw: object):
    from PySide6.QtCore import QByteArray

    if not isinstance(raw, (bytes, bytearray, QByteArray)):
        raise TypeError
    return QByteArray(raw)
