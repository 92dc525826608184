"""Screenshot of `gdsbench report --html` in headless Chromium, for docs/figures (make docs-screenshot).

    python tools/html_screenshot.py OUT.png RESULTS.csv [RESULTS.csv ...] [--width 1300] [--height 2600 | --full]

Renders the page into a temporary folder, has Chromium draw it (an argument list, no shell) and keeps the
top `--height` pixels (the headline, the tables and the notes), or with `--full` the whole page (drawn
FULL_HEIGHT pixels tall, cut below its last line). The PNG is saved in 256 colours (a full page of
checkpoint runs: about 0.8 MB, not 2). Needs `chromium` (apt-get install chromium).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from PIL import Image, ImageChops

from gdsbench import results
from gdsbench.report import html

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
#: The window's height for a whole page: taller than any report page of the samples (about 10,500 pixels).
FULL_HEIGHT = 20000
#: White space kept below a whole page's last line.
MARGIN = 24


def browser() -> str:
    """The first headless-capable Chromium on PATH."""
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    sys.exit(f"no Chromium found ({', '.join(BROWSERS)}): apt-get install -y chromium")


def screenshot(page: Path, out: Path, width: int, height: int | None) -> None:
    """Chromium draws the page `width` wide; the top `height` pixels are kept, or (None) the whole page."""
    size = f"--window-size={width},{height or FULL_HEIGHT}"
    argv = [browser(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", size,
            f"--screenshot={out}", page.resolve().as_uri()]  # fmt: skip
    subprocess.run(argv, check=True, capture_output=True, timeout=180)
    with Image.open(out) as drawn:
        image = drawn.convert("RGB")
    if height is None:
        image = image.crop((0, 0, width, min(image.height, content_bottom(image) + MARGIN)))
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(out, optimize=True)


def content_bottom(image: Image.Image) -> int:
    """The row below the page's last non-white pixel."""
    box = ImageChops.difference(image, Image.new("RGB", image.size, "white")).getbbox()
    return box[3] if box else image.height


def main() -> None:
    """Parse the arguments, write the page, take the screenshot."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("csvs", nargs="+", type=Path)
    parser.add_argument("--width", type=int, default=1300)
    parser.add_argument("--height", type=int, default=2600)
    parser.add_argument("--full", action="store_true", help="the whole page, however tall (not --height)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gdsbench-page-") as folder:
        page = html.write(results.load(args.csvs), Path(folder))
        screenshot(page, args.out, args.width, None if args.full else args.height)
    with Image.open(args.out) as image:
        print(f"{args.out}: {image.width}x{image.height}, {args.out.stat().st_size // 1024} KiB")


if __name__ == "__main__":
    main()
