"""The HTML report in a real browser: headless Chromium (Debian's ``chromium``; ``.ci/setup-extra`` installs it)
loads the page from a file with networking off, and the screenshot must show the roofline chart: the plot area
(its background ``#fcfcfd`` is used nowhere else) holds many colors, among them the op points' fill blended at
60% opacity. The PNG is decoded here with zlib and numpy (no imaging library). Skipped without the browser."""
from __future__ import annotations

import os
import re
import struct
import subprocess
import zlib

import numpy as np
import pytest

from conftest import cpu_fixture
from tracekit import pipeline
from tracekit.report.render import html as html_r

CHROMIUM = "/usr/bin/chromium"
PLOT_BG = (252, 252, 253)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
         "--window-size=1400,4000"]

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium is not installed (.ci/setup-extra)")


def read_png(path) -> np.ndarray:
    """Decode an 8-bit RGB/RGBA non-interlaced PNG into an (h, w, channels) array."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, []
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and not interlace, (depth, ctype, interlace)
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + n
    bpp = 3 if ctype == 2 else 4
    raw, stride = zlib.decompress(b"".join(idat)), w * bpp
    out = np.zeros((h, stride), np.uint8)
    prev = np.zeros(stride, np.int32)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = np.frombuffer(raw, np.uint8, stride, y * (stride + 1) + 1).astype(np.int32)
        if f == 0:
            cur = line
        elif f == 1:  # Sub: running sum along the row, per channel
            cur = np.cumsum(line.reshape(w, bpp), axis=0).reshape(-1) & 255
        elif f == 2:  # Up
            cur = (line + prev) & 255
        else:  # Average, Paeth: sequential along the row
            cur, p = line.tolist(), prev.tolist()
            for i in range(stride):
                a = cur[i - bpp] if i >= bpp else 0
                if f == 3:
                    cur[i] = (cur[i] + ((a + p[i]) >> 1)) & 255
                else:
                    b, c = p[i], (p[i - bpp] if i >= bpp else 0)
                    pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                    cur[i] = (cur[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
            cur = np.array(cur, np.int32)
        out[y] = cur
        prev = cur
    return out.reshape(h, w, bpp)[:, :, :3]


def screenshot(page_path, png_path, profile_dir) -> subprocess.CompletedProcess:
    cmd = [CHROMIUM, *FLAGS, f"--user-data-dir={profile_dir}", f"--screenshot={png_path}",
           page_path.resolve().as_uri()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def dump_dom(page_path, profile_dir) -> str:
    cmd = [CHROMIUM, *FLAGS, f"--user-data-dir={profile_dir}", "--dump-dom", page_path.resolve().as_uri()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout


def blend(hex_color: str, alpha: float = 0.6) -> np.ndarray:
    c = np.array([int(hex_color[i:i + 2], 16) for i in (1, 3, 5)], float)
    return alpha * c + (1 - alpha) * np.array(PLOT_BG, float)


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    rep = pipeline.analyze(str(cpu_fixture("sharded8")))
    d = tmp_path_factory.mktemp("html")
    p = d / "report.html"
    p.write_text(html_r.render(rep), encoding="utf-8")
    return rep, p


def test_screenshot_shows_the_roofline_chart(page, tmp_path):
    rep, path = page
    png = tmp_path / "shot.png"
    for _ in range(2):  # a cold browser start can time out on a busy machine: one retry
        res = screenshot(path, png, tmp_path / "profile")
        if png.exists():
            break
    assert png.exists(), f"chromium wrote no screenshot (exit {res.returncode}): {res.stderr[-2000:]}"
    img = read_png(png)
    assert img.shape[:2] == (4000, 1400)
    plot = np.all(img == PLOT_BG, axis=2)
    ys, xs = np.nonzero(plot)
    assert len(ys) > 50_000, "the roofline plot area is not on the screenshot"
    region = img[ys.min():ys.max() + 1, xs.min():xs.max() + 1].reshape(-1, 3)
    colors = {tuple(c) for c in region[:: 7]}
    assert len(colors) > 30, f"the chart region is nearly blank ({len(colors)} colors)"
    used = {p["bound_by"] for p in rep.data["roofline"]["points"]}
    for bound in used:  # every kind of point on the chart shows its blended fill somewhere
        near = np.abs(region.astype(float) - blend(html_r.COLORS[bound])).max(axis=1) <= 8
        assert near.sum() >= 20, f"no {bound}-bound points drawn"
    dark = (region.max(axis=1) < 80).sum()  # the roofs and the point outlines
    assert dark > 200


def test_browser_dom_has_the_points_and_no_script_errors(page, tmp_path):
    rep, path = page
    dom = dump_dom(path, tmp_path / "profile")
    assert dom.count('class="op-point"') == len(rep.data["roofline"]["points"])
    inner = re.findall(r'<circle class="op-point"[^>]*>(.*?)</circle>', dom, re.S)
    assert len(inner) == len(rep.data["roofline"]["points"])
    assert not any(inner), "the page script did not run (it moves each point's <title> into the tooltip)"


def test_screenshot_shows_the_step_timeline(tmp_path):
    """The per-device step timeline draws one row of step bars per device, in the breakdown's colors, inside its
    plot area (background used nowhere else); its zoom script ran (no script error before it)."""
    from tracekit.report.render import timeline_html as tlh
    rep = pipeline.analyze(str(cpu_fixture("allreduce_exposed")))
    page = tmp_path / "r.html"
    page.write_text(html_r.render(rep), encoding="utf-8")
    png = tmp_path / "shot.png"
    cmd = [CHROMIUM, *[f for f in FLAGS if not f.startswith("--window-size")], "--window-size=1400,5000",
           f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={png}", page.resolve().as_uri()]
    for _ in range(2):
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if png.exists():
            break
    assert png.exists(), res.stderr[-2000:]
    img = read_png(png)
    bg = tuple(int(tlh.PLOT_BG[i:i + 2], 16) for i in (1, 3, 5))
    ys, xs = np.nonzero(np.all(img == bg, axis=2))
    assert len(ys) > 5_000, "the timeline plot area is not on the screenshot"
    region = img[ys.min():ys.max() + 1, xs.min():xs.max() + 1]

    def rows_with(hex_color):
        c = np.array([int(hex_color[i:i + 2], 16) for i in (1, 3, 5)])
        hit = np.all(np.abs(region.astype(int) - c) <= 6, axis=2)
        return hit, np.flatnonzero(hit.sum(axis=1) > 20)
    compute, rows = rows_with(tlh.PARTS[0][2])
    exposed, erows = rows_with(tlh.PARTS[1][2])
    assert compute.sum() > 2_000 and exposed.sum() > 1_000
    bands = np.sum(np.diff(rows) > 1) + 1  # separate horizontal bands of compute: one per device row
    assert bands == rep.data["summary"]["devices"] == 8
    dom = dump_dom(page, tmp_path / "profile")
    assert 'data-ready="1"' in dom and dom.count('class="tl-seg"') >= 8 * 4
