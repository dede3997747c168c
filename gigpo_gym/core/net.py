"""What every server of the suite says before it binds an address."""

from __future__ import annotations

import ipaddress
import sys


def warn_if_public(host: str, what: str) -> None:
    """Warn on stderr when ``host`` is not a loopback address (servers default to 127.0.0.1)."""
    try:
        if not ipaddress.ip_address(host).is_loopback:
            print(f"warning: binding {host} exposes the {what} beyond this machine", file=sys.stderr)
    except ValueError:  # a host name
        print(f"warning: binding {host!r}; use 127.0.0.1 to keep the {what} private", file=sys.stderr)
