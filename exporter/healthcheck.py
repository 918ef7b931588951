"""``python -m coding_agent_exporter.healthcheck [HOST:PORT]``: the container's
HEALTHCHECK (exit 0: healthy, 1: not).

It asks ``/-/healthy`` over HTTP, then over HTTPS (certificate not checked:
the check runs on loopback next to the server and only asks whether it
answers). With ``--web.config.file`` basic auth on, the answer is 401 —
still the exporter's HTTP server answering, so healthy; the check needs no
credentials in the image. Standard library only; never raises.
"""

from __future__ import annotations

import ssl
import sys
import urllib.error
import urllib.request

DEFAULT = "127.0.0.1:9877"


def healthy(address: str = DEFAULT, timeout: float = 4.0) -> bool:
    """True when an HTTP or HTTPS server on ``address`` (``HOST:PORT``)
    answers ``/-/healthy`` with 200, or with 401 (basic auth on)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                         urllib.request.HTTPSHandler(context=ssl._create_unverified_context()))
    for scheme in ("http", "https"):
        try:
            with opener.open(f"{scheme}://{address}/-/healthy", timeout=timeout) as r:
                return r.status == 200
        except urllib.error.HTTPError as e:
            return e.code == 401
        except (OSError, ValueError):
            continue  # refused, or plain HTTP to a TLS server (and the reverse): try the other scheme
    return False


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return 0 if healthy(argv[0] if argv else DEFAULT) else 1


if __name__ == "__main__":
    sys.exit(main())
