"""Screenshot of `gdsbench report --html` in headless Chromium, for docs/figures (make docs-screenshot), and the
page's layout as Chromium measures it (`measure`, for the browser tests).

    python tools/html_screenshot.py OUT.png RESULTS.csv [RESULTS.csv ...] [--width 1300] [--height 2600 | --full]

Renders the page into a temporary folder, has Chromium draw it (an argument list, no shell) and keeps the
top `--height` pixels (the headline, the tables and the notes), or with `--full` the whole page (drawn
FULL_HEIGHT pixels tall, cut below its last line). The PNG is saved in 256 colours (a full page of
checkpoint runs: about 0.8 MB, not 2). Needs `chromium` (apt-get install chromium).
"""

from __future__ import annotations

import argparse
import html as markup
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from PIL import Image, ImageChops

from gdsbench import results
from gdsbench.report import html

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
#: A headless Chromium that reaches nothing outside the page and keeps no state (each run: an empty profile).
HEADLESS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)
#: Injected into a copy of the page: records its console errors, then on load writes what it measured into the DOM
#: (Chromium's --dump-dom prints it): the document's width, every box whose content is wider than the box (by the
#: heading above it), the tables, the images and those that did not load.
PROBE = """<script>
const errors = [];
addEventListener("error", e => errors.push(String(e.message || (e.target && e.target.src))), true);
const consoleError = console.error;
console.error = (...args) => { errors.push(args.join(" ")); consoleError(...args); };
function heading(node) {
  for (let n = node; n; n = n.previousElementSibling || n.parentElement) if (n.tagName === "H2") return n.textContent;
  return "";
}
addEventListener("load", () => {
  const boxes = [...document.querySelectorAll("body *")].filter(e => e.scrollWidth > e.clientWidth + 1
    && getComputedStyle(e).overflowX !== "visible");
  const images = [...document.images];
  const out = document.createElement("pre");
  out.id = "gdsbench-measure";
  out.textContent = JSON.stringify({
    width: document.documentElement.scrollWidth, viewport: innerWidth, errors,
    scrolling: boxes.map(e => ({heading: heading(e), tag: e.tagName.toLowerCase(), className: e.className,
                                content: e.scrollWidth, box: e.clientWidth})),
    tables: document.querySelectorAll("table").length, images: images.length,
    broken: images.filter(i => !i.complete || i.naturalWidth === 0).length});
  document.body.appendChild(out);
});
</script>"""
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


def chromium(page: Path, width: int, height: int, *action: str) -> str:
    """Headless Chromium, with an empty profile of its own, does `action` on the page in a window of that size;
    its stdout."""
    with tempfile.TemporaryDirectory(prefix="gdsbench-chromium-") as profile:
        argv = [
            browser(),
            *HEADLESS,
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            *action,
            page.resolve().as_uri(),
        ]
        return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=180).stdout


def measure(page: Path, width: int) -> dict:
    """The page as Chromium lays it out `width` pixels wide (PROBE: widths, boxes that scroll sideways, tables,
    images, console errors), measured in a copy of it."""
    with tempfile.TemporaryDirectory(prefix="gdsbench-measure-") as folder:
        probed = Path(folder) / page.name
        probed.write_text(page.read_text(encoding="utf-8").replace("<head>", "<head>" + PROBE, 1), encoding="utf-8")
        dom = chromium(probed, width, 900, "--dump-dom")
    found = re.search(r'<pre id="gdsbench-measure">(.*?)</pre>', dom, re.DOTALL)
    if found is None:
        raise RuntimeError(f"{page}: Chromium's page wrote no measurement (its load event never came)")
    return dict(json.loads(markup.unescape(found.group(1))))


def screenshot(page: Path, out: Path, width: int, height: int | None) -> None:
    """Chromium draws the page `width` wide; the top `height` pixels are kept, or (None) the whole page."""
    chromium(page, width, height or FULL_HEIGHT, f"--screenshot={out}")
    with Image.open(out) as drawn:
        image = drawn.convert("RGB")
    if height is None:
        image = image.crop((0, 0, width, min(image.height, content_bottom(image) + MARGIN)))
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(out, optimize=True)


def content_bottom(image: Image.Image) -> int:
    """The row below the page's last non-white pixel."""
    box = ImageChops.difference(image, Image.new("RGB", image.size, "white")).getbbox()
    return box[3] if box else image.height


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (sys.argv's when None); `height` is None for `--full` (the whole page)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("csvs", nargs="+", type=Path)
    parser.add_argument("--width", type=int, default=1300)
    parser.add_argument("--height", type=int, default=2600)
    parser.add_argument("--full", action="store_true", help="the whole page, however tall (not --height)")
    args = parser.parse_args(argv)
    args.height = None if args.full else args.height
    return args


def main() -> None:
    """Parse the arguments, write the page, take the screenshot."""
    args = arguments()
    with tempfile.TemporaryDirectory(prefix="gdsbench-page-") as folder:
        page = html.write(results.load(args.csvs), Path(folder))
        screenshot(page, args.out, args.width, args.height)
    with Image.open(args.out) as image:
        print(f"{args.out}: {image.width}x{image.height}, {args.out.stat().st_size // 1024} KiB")


if __name__ == "__main__":
    main()
