"""Refresh docs/ui-screenshot.png: runs the browser test (a real CPU job through the API and a
worker, opened in headless Chromium) with TUNEHUB_TEST_ARTIFACTS set, then copies its job-page
screenshot into docs/. Needs chromium and chromium-driver (Debian packages).

    .venv/bin/python bench/ui_screenshot.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="tunehub-ui-") as artifacts:
        env = {**os.environ, "TUNEHUB_TEST_ARTIFACTS": artifacts}
        test = "tests/service/api/test_ui_browser.py"
        command = [sys.executable, "-m", "pytest", "-q", "-rs", test]
        result = subprocess.run(command, cwd=ROOT, env=env, check=False)
        shot = Path(artifacts) / "ui-job.png"
        if result.returncode != 0 or not shot.exists():
            print("the browser test failed or was skipped; docs/ui-screenshot.png unchanged")
            return 1
        shutil.copyfile(shot, ROOT / "docs" / "ui-screenshot.png")
        print(f"wrote {ROOT / 'docs' / 'ui-screenshot.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
