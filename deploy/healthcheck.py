"""The api container's health check (docker-compose.yml): GET /healthz on this container's port.

Exit 0 when the service answers 200 with ``"status": "ok"`` (it reached its database), else 1
with the reason on stderr. Standard library only; the port is ``TUNEHUB_PORT`` (8765).
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request

TIMEOUT_S = 4.0


def main() -> int:
    url = f"http://127.0.0.1:{os.environ.get('TUNEHUB_PORT') or '8765'}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            body = json.loads(response.read())
    except urllib.error.HTTPError as exc:  # 503: the database does not answer
        print(f"unhealthy: {url} answered HTTP {exc.code}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:
        print(f"unhealthy: {url}: {exc}", file=sys.stderr)
        return 1
    if body.get("status") != "ok":
        print(f"unhealthy: {url} answered {body}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
