"""Open the built book in a real browser (Debian's chromium driven by Playwright): every page
loads, every image has pixels, math is typeset, internal links resolve, the status page
lists every chapter, and axe-core finds no serious or critical accessibility violation (nor an
empty table header) on any page."""

from __future__ import annotations

import functools
import http.server
import shutil
import threading
from pathlib import Path
from urllib.parse import urljoin, urlparse

import pytest
from conftest import ROOT

from lib.pipeline.chapters import Book

pytestmark = [pytest.mark.browser, pytest.mark.slow]
HTML = ROOT / "_build" / "html"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
CHAPTERS = Book(ROOT).chapters()


@pytest.fixture(scope="module")
def server(built_book):
    if not (HTML / "index.html").exists():
        pytest.fail("the book was not built")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(HTML))
    handler.log_message = lambda *a, **k: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed (make test installs it)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield b
        b.close()


PAGES = ["index.html", "book/status.html", "book/bibliography.html", "book/reproducing.html", "book/citing.html",
         *[f"book/chapters/{c.slug}.html" for c in CHAPTERS]]


@pytest.mark.parametrize("page_path", PAGES)
@pytest.mark.integration
def test_page_renders(browser, server, page_path):
    page = browser.new_page()
    failed_requests = []
    page.on("response", lambda r: r.status >= 400 and r.url.startswith(server)
            and not r.url.endswith("favicon.ico") and failed_requests.append(f"{r.status} {r.url}"))
    response = page.goto(urljoin(server, page_path), wait_until="load")
    assert response.status == 200
    if page_path == "index.html":  # Jupyter Book's index redirects to the root page
        page.wait_for_url("**/book/intro.html")
        page.wait_for_load_state("load")
    images = page.eval_on_selector_all("img", "els => els.map(i => [i.src, i.complete && i.naturalWidth > 0])")
    assert all(ok for _, ok in images), f"images that did not load: {[s for s, ok in images if not ok]}"
    n_math = page.locator(".math").count()
    if n_math:
        page.wait_for_function("() => document.querySelectorAll('mjx-container').length > 0", timeout=20000)
        assert page.locator("mjx-merror, .MathJax_Error").count() == 0, "MathJax reported an error"
    # Every internal link resolves.
    hrefs = page.eval_on_selector_all("a[href]", "els => els.map(a => a.href)")
    internal = sorted({h.split("#")[0] for h in hrefs if h.startswith(server)})
    for href in internal:
        status = page.request.get(href).status
        assert status == 200, f"{page_path}: link {href} → {status}"
    assert not failed_requests, failed_requests
    page.close()


@pytest.mark.integration
def test_chapter_pages_show_figures(browser, server):
    """Every finished chapter shows at least one figure (placeholders say they are in preparation)."""
    page = browser.new_page()
    for ch in CHAPTERS:
        page.goto(urljoin(server, f"book/chapters/{ch.slug}.html"), wait_until="load")
        text = page.inner_text("main")
        if "in preparation" in text:
            continue
        assert page.locator("main img").count() > 0, f"{ch.slug} shows no figure"
    page.close()


@pytest.mark.integration
def test_status_page_lists_every_chapter(browser, server):
    page = browser.new_page()
    page.goto(urljoin(server, "book/status.html"), wait_until="load")
    text = page.inner_text("main")
    for ch in CHAPTERS:
        assert ch.slug in text, f"status page misses {ch.slug}"
    assert "not run" not in text
    links = page.eval_on_selector_all("main a[href]", "els => els.map(a => a.getAttribute('href'))")
    assert sum(urlparse(h).path.endswith(".html") and "chapters/" in h for h in links) >= len(CHAPTERS)
    page.close()


@pytest.mark.integration
def test_status_page_verdicts_are_visible_without_horizontal_scrolling(browser, server):
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    page.goto(urljoin(server, "book/status.html"), wait_until="load")
    badges = page.locator("table.status-claims .claim-badge")
    assert badges.count() > 0, "the status page shows no verdict badges"
    overflow = page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, f"the status page scrolls horizontally by {overflow}px at 1300px"
    for i in range(badges.count()):
        box = badges.nth(i).bounding_box()
        assert box and 0 <= box["x"] and box["x"] + box["width"] <= 1300, f"verdict {i} is off screen: {box}"
    page.close()


#: Finds, in the page's main column, every element that runs past the column's right edge (and is
#: not inside a box that scrolls), and every table cell whose text runs two decimals together.
_WIDTH_PROBE = """() => {
  const main = document.querySelector('main') || document.body;
  const right = main.getBoundingClientRect().right + 1;
  const scrolls = el => { for (let e = el.parentElement; e && e !== main; e = e.parentElement) {
      const o = getComputedStyle(e).overflowX; if (o === 'auto' || o === 'scroll') return true; } return false; };
  const wide = [];
  for (const el of main.querySelectorAll('pre, table, td, th, img, svg, div.highlight, code')) {
    const box = el.getBoundingClientRect();
    if (box.width > 0 && box.right > right && !scrolls(el))
      wide.push(el.tagName + ': ' + (el.innerText || '').slice(0, 60));
  }
  const runTogether = [];
  for (const td of main.querySelectorAll('td')) {
    // 0.000950.0787, not a version such as 2.13.0
    if (/\\d\\.\\d{3,}\\.\\d/.test(td.innerText)) runTogether.push(td.innerText.slice(0, 80));
  }
  return {wide, runTogether};
}"""


@pytest.mark.parametrize("page_path", ["book/reproducing.html", "book/citing.html", "book/status.html",
                                       *[f"book/chapters/{c.slug}.html" for c in CHAPTERS]])
@pytest.mark.integration
def test_pages_fit_a_laptop_screen(browser, server, page_path):
    """At 1280 px every code block, table and figure fits its column (or scrolls in its own box),
    and no table cell runs two numbers together."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(urljoin(server, page_path), wait_until="load")
    found = page.evaluate(_WIDTH_PROBE)
    page.close()
    assert not found["wide"], f"{page_path}: wider than the column at 1280 px: {found['wide'][:5]}"
    assert not found["runTogether"], f"{page_path}: numbers run together: {found['runTogether'][:5]}"


@pytest.mark.parametrize("ch", CHAPTERS, ids=lambda c: c.number)
@pytest.mark.integration
def test_chapter_page_is_finished_for_a_reader(browser, server, ch):
    """Numbered, captioned figures with alt text; no injected-parameters cell; downloads that
    resolve; theorems numbered once; no repository link unless one is configured."""
    import re

    page = browser.new_page()
    page.goto(urljoin(server, f"book/chapters/{ch.slug}.html"), wait_until="load")
    figures = page.eval_on_selector_all(
        "main img", """els => els.map(i => {
            const fig = i.closest('figure');
            const cap = fig && fig.querySelector('figcaption');
            return {alt: i.getAttribute('alt') || '', caption: cap ? cap.innerText : ''};
        })""")
    assert figures, f"{ch.slug}: no figure"
    for f in figures:
        assert re.match(r"^Fig\. ?\d+", f["caption"].strip()), f"{ch.slug}: a figure without a numbered caption: {f}"
        assert len(f["alt"]) > 15 and not re.fullmatch(r"[0-9a-f]{16,}.*", f["alt"]), \
            f"{ch.slug}: a figure without alt text: {f}"
    assert page.locator(".tag_injected-parameters").count() == 0, f"{ch.slug}: papermill's cell is visible"
    text = page.inner_text("main")
    outputs = "\n".join(page.eval_on_selector_all(".cell_output", "els => els.map(e => e.innerText)"))
    assert not re.search(r"(Theorem|Proposition|Lemma|Corollary|Definition) \d+(\.\d+)+ \((Theorem|Proposition|"
                         r"Lemma|Corollary|Definition)", text), f"{ch.slug}: a theorem numbered twice"
    for needle in ("PosixPath(", "Claim(", "array(", "claims recorded"):
        assert needle not in outputs, f"{ch.slug}: a raw repr in a cell's output ({needle})"
    downloads = page.eval_on_selector_all("main a.download, main a[download]", "els => els.map(a => a.href)")
    assert any(h.endswith("results.json") for h in downloads) and any(h.endswith("figures.zip") for h in downloads), \
        f"{ch.slug}: downloads missing: {downloads}"
    for href in downloads:
        assert page.request.get(href).status == 200, href
    external = page.eval_on_selector_all("a[href]", "els => els.map(a => a.href)")
    assert not [h for h in external if "github.com" in h or "mybinder" in h or "colab" in h], \
        f"{ch.slug}: links to a repository although none is configured"
    page.close()


#: axe-core impacts that fail the check; empty table headers (minor) are checked too (issue 44).
AXE_FAILING = ("serious", "critical")


def _axe_violations(page) -> list[str]:
    from axe_playwright_python.sync_playwright import Axe

    found = Axe().run(page).response["violations"]
    return [f"{v['id']} ({v['impact']}): {v['help']} at {v['nodes'][0]['target']}"
            for v in found if v["impact"] in AXE_FAILING or v["id"] == "empty-table-header"]


def test_axe_core_reports_a_known_violation(browser):
    """The check below can fail: axe-core, as installed, finds a list without list items."""
    page = browser.new_page()
    page.set_content('<html lang="en"><head><title>t</title></head><body><main><h1>t</h1>'
                     '<div role="list"><div>not a list item</div></div>'
                     "<table><tr><th></th><th>a</th></tr><tr><td>1</td><td>2</td></tr></table></main></body></html>")
    found = _axe_violations(page)
    assert any(v.startswith("aria-required-children (critical)") for v in found), found
    assert any(v.startswith("empty-table-header") for v in found), found
    page.close()


@pytest.mark.integration
def test_no_page_has_a_serious_accessibility_violation(browser, server):
    """axe-core on every HTML page of the built book (redirects aside), after MathJax has typeset."""
    pages = sorted(str(p.relative_to(HTML)) for p in HTML.rglob("*.html")
                   if not {"_static", "_sources"} & set(p.relative_to(HTML).parts)
                   and 'http-equiv="refresh"' not in p.read_text().lower())  # a redirect: its target is checked
    assert len(pages) >= len(PAGES), pages
    page = browser.new_page()
    problems = []
    for path in pages:
        page.goto(urljoin(server, path), wait_until="load")
        if page.locator(".math").count():
            page.wait_for_function("() => document.querySelectorAll('mjx-container').length > 0", timeout=20000)
        problems += [f"{path}: {v}" for v in _axe_violations(page)]
    page.close()
    assert not problems, "\n".join(problems)


@pytest.mark.integration
def test_chapter_pages_show_their_paper_record_or_say_there_is_none(browser, server):
    """Issue 44: each chapter page has an "At the paper profile" section from its record in
    book/records/paper/, and the reproducing page's table has a row per chapter."""
    from lib.pipeline import records

    book = Book(ROOT)
    page = browser.new_page()
    for ch in CHAPTERS:
        page.goto(urljoin(server, f"book/chapters/{ch.slug}.html"), wait_until="load")
        text = page.inner_text("main")
        assert "At the paper profile" in text, f"{ch.slug}: no paper section"
        recorded = records.load(book, "paper", ch) is not None
        assert ("From the recorded paper run" in text) == recorded, ch.slug
        assert ("Not yet recorded" in text) == (not recorded), ch.slug
    page.goto(urljoin(server, "book/reproducing.html"), wait_until="load")
    rows = page.eval_on_selector_all("main table tr", "rows => rows.map(r => r.innerText)")
    for ch in CHAPTERS:
        row = next((r for r in rows if r.startswith(f"{ch.number} ")), None)
        assert row is not None, f"the reproducing page's table has no row for {ch.slug}"
        assert ("not yet recorded" in row) == (records.load(book, "paper", ch) is None), row
    page.close()
