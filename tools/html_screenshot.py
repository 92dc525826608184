"""Screenshot of `gdsbench report --html` in headless Chromium, for docs/figures (make docs-screenshot).

    python tools/html_screenshot.py OUT.png RESULTS.csv [RESULTS.csv ...] [--width 1300] [--height 2600]

Renders the page into a temporary folder, has Chromium draw it (an argument list, no shell) and keeps the
top `--height` pixels: the headline, the tables and the notes. Needs `chromium` (apt-get install chromium).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from PIL import Image

from gdsbench import results
from gdsbench.report import html

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def browser() -> str:
    """The first headless-capable Chromium on PATH."""
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    sys.exit(f"no Chromium found ({', '.join(BROWSERS)}): apt-get install -y chromium")


def screenshot(page: Path, out: Path, width: int, height: int) -> None:
    """Chromium draws the page `width` wide; the top `height` pixels are kept."""
    argv = [browser(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            f"--window-size={width},{height}", f"--screenshot={out}", page.resolve().as_uri()]  # fmt: skip
    subprocess.run(argv, check=True, capture_output=True, timeout=120)
    with Image.open(out) as image:
        image.convert("RGB").save(out, optimize=True)


def main() -> None:
    """Parse the arguments, write the page, take the screenshot."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("csvs", nargs="+", type=Path)
    parser.add_argument("--width", type=int, default=1300)
    parser.add_argument("--height", type=int, default=2600)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gdsbench-page-") as folder:
        page = html.write(results.load(args.csvs), Path(folder))
        screenshot(page, args.out, args.width, args.height)
    print(f"{args.out}: {args.width}x{args.height}")


if __name__ == "__main__":
    main()
