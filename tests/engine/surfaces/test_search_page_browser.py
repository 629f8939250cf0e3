"""The search page in a real browser: headless Chromium (Debian's ``chromium`` and
``chromium-driver``) driven by Selenium against a real ``tandem serve`` process.

One browser session and one server for every check: a person types a query and presses
Enter and sees the expected first result with the query terms marked; a hostile title
shows as text and its ``javascript:`` URL is no link; paging moves through results and
the address bar; the no-results message is plain; the page fits a phone-width screen; the
controls are labelled. A screenshot is written (to ``TANDEM_SCREENSHOT_DIR`` too when set,
which is how the README's picture is made). Skipped where the browser is missing, except
in CI (``CI=true``), where it must run.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine import CorpusConfig, Document, SearchEngine
from tests.support.serve import running_server

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
HOSTILE_TITLE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned=2">Hostile'

HELP = [
    Document(
        id="reset",
        title="Reset your password",
        text="Forgot your password? Open Settings, choose Security and use the reset link.",
        url="https://example.org/help/reset",
    ),
    Document(
        id="two-factor",
        title="Two-factor sign-in",
        text="Add a second step after your password: a code from an app or a security key.",
        url="https://example.org/help/two-factor",
    ),
    Document(
        id="locked",
        title="Locked out of your account",
        text="After five wrong passwords the account locks for an hour; reset it by email.",
        url="https://example.org/help/locked",
    ),
    Document(
        id="billing",
        title="Billing and invoices",
        text="Invoices are sent monthly; update the card under Billing.",
        url="/help/billing",
    ),
    Document(
        id="hostile",
        title=HOSTILE_TITLE,
        text="A hostile document about passwords <b>bold</b> and scripts.",
        url="javascript:window.__pwned=3",
    ),
    Document(
        id="spoof",
        title="Holiday picture",
        text="A bidiurl spoof: a direction override hides the real file type.",
        url="https://example.org/\u202egpj.exe",
    ),
    Document(
        id="cafe",
        title="Opening hours",
        text="Le cafe\u0301 est ouvert. हिन्दी भाषा में भी।",  # "café" decomposed: e + U+0301
        url="https://example.org/cafe",
    ),
    Document(
        id="relative",
        title="Your API token",
        text="A relativeurl document: its url is one on the site it came from.",
        url="/help/token",
    ),
    Document(
        id="staff",
        title="Vault password rotation",
        text="Staff only: the vault password rotates.",
        access_groups=frozenset({"staff"}),
    ),
    *[
        Document(
            id=f"page-{i:02d}",
            title=f"Paging article {i:02d}",
            text=f"Paging through many articles, number {i}.",
            url=f"/articles/{i}",
        )
        for i in range(1, 24)
    ],
]


def _need(path: str) -> None:
    if shutil.which(path) is None:
        reason = f"{path} is not installed (apt-get install chromium chromium-driver)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI must run this test")
        pytest.skip(reason)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home = tmp_path_factory.mktemp("page") / "engine"
    with SearchEngine(home) as engine:
        engine.create_corpus(CorpusConfig(name="help", embedder=None)).add(HELP)
        engine.create_corpus(CorpusConfig(name="notes", embedder=None)).add(
            [Document(id="n1", title="A note", text="Notes about teapots.", url="/notes/1")]
        )
    with running_server(home) as (base, _):
        yield base


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    _need(CHROMIUM)
    _need(CHROMEDRIVER)
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must not download
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1100,900",
        "--lang=en-US",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(120)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(driver: Any, condition: Any, timeout: float = 60) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(condition)


def _status(driver: Any) -> str:
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.ID, "status").text)


def _search(driver: Any, query: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    box = driver.find_element(By.ID, "q")
    box.clear()
    box.send_keys(query)
    before = _status(driver)
    box.send_keys(Keys.ENTER)  # a person presses Enter, no clicking
    _wait(driver, lambda d: _status(d) not in ("", "Searching…", before))


def test_a_person_searches_pages_and_stays_safe(server: str, browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    driver = browser
    driver.get(server)
    _wait(driver, lambda d: d.find_element(By.ID, "picker").is_displayed())

    # Labelled controls, and the focus starts in the search box.
    assert driver.find_element(By.CSS_SELECTOR, "label[for='q']").get_attribute("textContent")
    assert driver.find_element(By.CSS_SELECTOR, "label[for='corpus']").text == "Collection"
    assert driver.find_element(By.CSS_SELECTOR, "form[role='search']")
    assert driver.switch_to.active_element.get_attribute("id") == "q"
    picker = Select(driver.find_element(By.ID, "corpus"))
    assert [o.text for o in picker.options] == ["help", "notes"]
    assert not driver.find_elements(By.CSS_SELECTOR, "[id*='grep'], [name='mode']")

    # Type, Enter: the expected first result, title linked, query terms marked.
    _search(driver, "forgot password")
    first = driver.find_elements(By.CSS_SELECTOR, "#results .result")[0]
    link = first.find_element(By.CSS_SELECTOR, "h2 a")
    assert link.text == "Reset your password"
    assert link.get_attribute("href") == "https://example.org/help/reset"
    marks = [m.text.lower() for m in first.find_elements(By.CSS_SELECTOR, ".excerpt mark")]
    assert "forgot" in marks and "password" in marks
    assert not driver.find_element(By.ID, "pager").is_displayed()  # one page only
    assert "Vault" not in driver.page_source  # the non-public document never shows

    # The hostile document: its title is text, its javascript: URL is no link.
    _search(driver, "hostile scripts")
    hostile = driver.find_elements(By.CSS_SELECTOR, "#results .result")[0]
    heading = hostile.find_element(By.CSS_SELECTOR, "h2")
    assert heading.text == HOSTILE_TITLE
    assert not heading.find_elements(By.CSS_SELECTOR, "a, script, img")
    excerpt = hostile.find_element(By.CSS_SELECTOR, ".excerpt")
    assert "<b>bold</b>" in excerpt.text and not excerpt.find_elements(By.CSS_SELECTOR, "b")
    assert [m.text for m in excerpt.find_elements(By.CSS_SELECTOR, "mark")] == [
        "hostile",
        "scripts",
    ]
    assert driver.execute_script("return window.__pwned === undefined")
    assert not driver.find_elements(By.CSS_SELECTOR, "a[href^='javascript']")

    # Paging: 23 matching articles, ten a page, the address bar follows.
    _search(driver, "paging articles")
    assert len(driver.find_elements(By.CSS_SELECTOR, "#results .result")) == 10
    assert driver.find_element(By.ID, "prev").get_attribute("disabled") is not None
    driver.find_element(By.ID, "next").click()
    _wait(driver, lambda d: _status(d).startswith("Results 11–20"))
    assert "page=2" in driver.current_url
    driver.find_element(By.ID, "next").click()
    _wait(driver, lambda d: _status(d).startswith("Results 21–23"))
    assert driver.find_element(By.ID, "next").get_attribute("disabled") is not None
    driver.back()
    _wait(driver, lambda d: _status(d).startswith("Results 11–20"))
    # An address past the last page the API reaches is read as that page, not labelled
    # "Page 500" over page 101's answer.
    driver.get(server + "?q=paging+articles&corpus=help&page=500")
    _wait(driver, lambda d: d.find_element(By.ID, "page-label").text == "Page 101")

    # The other corpus, and a plain message when nothing matches.
    picker = Select(driver.find_element(By.ID, "corpus"))
    picker.select_by_visible_text("notes")
    _search(driver, "teapots")
    assert driver.find_element(By.CSS_SELECTOR, "#results h2").text == "A note"
    _search(driver, "zebra quantum")
    assert _status(driver).startswith("No results for “zebra quantum”")
    assert not driver.find_elements(By.CSS_SELECTOR, "#results .result")
    assert not driver.find_element(By.ID, "pager").is_displayed()

    # Phone width: nothing wider than the screen.
    picker.select_by_visible_text("help")
    _search(driver, "password")
    driver.set_window_size(375, 812)
    assert driver.execute_script(
        "return document.documentElement.scrollWidth <= document.documentElement.clientWidth"
    )
    driver.set_window_size(1100, 900)

    # The picture for the README.
    _search(driver, "reset password")
    shot = tmp_path / "search-page.png"
    assert driver.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    target = os.environ.get("TANDEM_SCREENSHOT_DIR")
    if target:
        shutil.copy(shot, Path(target) / "search-page.png")


def test_a_link_to_a_collection_that_is_gone_says_so(server: str, browser: Any) -> None:
    """Regression: ``?corpus=`` naming a dropped collection searched the first remaining
    one, under the old name in the address bar, with nothing said."""
    from selenium.webdriver.common.by import By

    driver = browser
    driver.get(server + "?q=password&corpus=dropped")
    _wait(driver, lambda d: "dropped" in _status(d))
    assert "no collection named “dropped”" in _status(driver)
    assert not driver.find_elements(By.CSS_SELECTOR, "#results .result")
    assert driver.find_element(By.ID, "picker").is_displayed()


def test_a_link_with_one_enormous_word_still_shows_results(server: str, browser: Any) -> None:
    """Regression: highlighting built one regular expression from the query's words, and
    a crafted link with a 50,000-letter word made it too large to compile; the error
    escaped and the page stayed on "Searching…" for good."""
    from selenium.webdriver.common.by import By

    driver = browser
    driver.get(server + "?q=password+" + "x" * 50_000 + "&corpus=help")
    _wait(driver, lambda d: _status(d).startswith("Results"))
    first = driver.find_elements(By.CSS_SELECTOR, "#results .result")[0]
    marks = [m.text.lower() for m in first.find_elements(By.CSS_SELECTOR, ".excerpt mark")]
    assert "password" in marks
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not [e for e in errors if "regular expression" in e["message"].lower()]


def _settled(driver: Any) -> bool:
    """The status shows an outcome, not a search under way."""
    return _status(driver) not in ("", "Searching…")


def test_a_url_with_a_direction_override_shows_what_the_link_opens(
    server: str, browser: Any
) -> None:
    """Regression: the stored URL was shown as text, so ``.../\\u202egpj.exe`` read as
    ``.../exe.jpg``; now the shown address is the link's own, percent-encoded, left to
    right."""
    from selenium.webdriver.common.by import By

    driver = browser
    driver.get(server + "?q=bidiurl&corpus=help")
    _wait(driver, lambda d: _status(d).startswith("Results"))
    result = driver.find_elements(By.CSS_SELECTOR, "#results .result")[0]
    href = result.find_element(By.CSS_SELECTOR, "h2 a").get_attribute("href")
    shown = result.find_element(By.CSS_SELECTOR, ".url")
    assert href == "https://example.org/%E2%80%AEgpj.exe"
    assert shown.text == href and "\u202e" not in shown.get_attribute("textContent")
    assert shown.get_attribute("dir") == "ltr"
    assert shown.value_of_css_property("unicode-bidi") == "isolate"


def test_back_to_a_collection_that_is_gone_says_so(server: str, browser: Any) -> None:
    """Regression: Back to an address naming a dropped collection silently searched
    another collection (only a fresh load said it was gone)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    driver = browser
    driver.get(server + "?q=password&corpus=dropped")
    _wait(driver, lambda d: "dropped" in _status(d))
    Select(driver.find_element(By.ID, "corpus")).select_by_visible_text("help")
    _search(driver, "forgot password")
    assert _status(driver).startswith("Results")
    driver.back()
    _wait(driver, lambda d: "“password”" in _status(d) or "dropped" in _status(d))
    assert "no collection named “dropped”" in _status(driver)
    assert not driver.find_elements(By.CSS_SELECTOR, "#results .result")
    assert driver.find_element(By.ID, "q").get_attribute("value") == "password"


def test_the_skip_link_keeps_the_results_and_what_is_being_typed(server: str, browser: Any) -> None:
    """Regression: "Skip to results" changed the fragment, the Back-button handler took
    that for a new address, searched again and replaced what the person was typing."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver = browser
    driver.get(server + "?q=password&corpus=help")
    _wait(driver, lambda d: _status(d).startswith("Results"))
    shown = _status(driver)
    count = len(driver.find_elements(By.CSS_SELECTOR, "#results .result"))
    box = driver.find_element(By.ID, "q")
    box.clear()
    box.send_keys("half typed")
    # hashchange comes after popstate: once it has fired, the page has reacted.
    driver.execute_script(
        "window.__hashChanges = 0;"
        "window.addEventListener('hashchange', () => window.__hashChanges++);"
        "document.querySelector('.skip-link').focus();"
    )
    driver.switch_to.active_element.send_keys(Keys.ENTER)
    _wait(driver, lambda d: d.execute_script("return window.__hashChanges") == 1)
    assert driver.current_url.endswith("#results")
    driver.back()  # and Back from the fragment: the same search, nothing to redo
    _wait(driver, lambda d: d.execute_script("return window.__hashChanges") == 2)
    assert box.get_attribute("value") == "half typed"
    assert _status(driver) == shown
    assert len(driver.find_elements(By.CSS_SELECTOR, "#results .result")) == count


# Holds the page's next fetch until the test answers it with `window.__answer(...)`.
HOLD_FETCH = """
window.fetch = () => new Promise((resolve) => {
  window.__answer = (status, body, type) =>
    resolve(new Response(body, {status: status, headers: {"Content-Type": type}}));
});
"""


def test_a_failed_page_turn_keeps_the_pager_and_the_focus(server: str, browser: Any) -> None:
    """Regression: a page turn that failed (503, or a 200 that is no JSON) hid the pager
    and dropped the focus to <body>; the 200 left the page on "Searching…" for good."""
    from selenium.webdriver.common.by import By

    driver = browser
    for status, body, content_type in [
        (503, '{"error": {"code": "engine_busy", "message": "busy"}}', "application/json"),
        (200, "<html>Sign in to the proxy</html>", "text/html"),
    ]:
        driver.get(server + "?q=paging+articles&corpus=help")
        _wait(driver, lambda d: _status(d).startswith("Results 1–10"))
        driver.execute_script(HOLD_FETCH)
        driver.find_element(By.ID, "next").click()
        _wait(driver, lambda d: d.execute_script("return Boolean(window.__answer)"))
        assert _status(driver) == "Searching…"
        assert driver.find_element(By.ID, "pager").is_displayed()
        for button in ("prev", "next"):  # no second turn while the first loads
            assert driver.find_element(By.ID, button).get_attribute("disabled") is not None
        driver.execute_script("window.__answer(...arguments)", status, body, content_type)
        _wait(driver, _settled)
        assert _status(driver).startswith("The search failed")
        assert driver.switch_to.active_element.get_attribute("id") == "status"
        assert driver.find_element(By.ID, "pager").is_displayed()
        assert driver.find_element(By.ID, "page-label").text == "Page 2"
        assert driver.find_element(By.ID, "prev").get_attribute("disabled") is None


def test_the_same_search_twice_adds_one_history_entry(server: str, browser: Any) -> None:
    """Regression: pressing Enter again on the same query pushed identical entries, so
    Back seemed to do nothing."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver = browser
    first = driver.current_window_handle
    driver.switch_to.new_window("tab")  # a history of its own, well under Chrome's cap
    try:
        driver.get(server)
        _wait(driver, lambda d: d.find_element(By.ID, "picker").is_displayed())
        before = driver.execute_script("return history.length")
        _search(driver, "password")
        box = driver.find_element(By.ID, "q")
        for _ in range(2):
            box.send_keys(Keys.ENTER)
            _wait(driver, lambda d: _status(d).startswith("Results"))
        assert driver.execute_script("return history.length") == before + 1
    finally:
        driver.close()
        driver.switch_to.window(first)


def test_a_failed_list_of_collections_is_asked_again(server: str, browser: Any) -> None:
    """Regression: one failed ``/v1/corpora`` at load left the page saying "There is
    nothing to search yet." to every search until a reload."""
    from selenium.webdriver.common.by import By

    driver = browser
    fail = driver.execute_cdp_cmd(
        "Page.addScriptToEvaluateOnNewDocument",
        {
            "source": """
            window.__listFailures = 1;
            window.__listError = "starting";
            const realFetch = window.fetch;
            window.fetch = function (url) {
              if (String(url).endsWith("/v1/corpora") && window.__listFailures > 0) {
                window.__listFailures--;
                const error = {code: "not_ready", message: window.__listError};
                const body = JSON.stringify({error: error});
                return Promise.resolve(new Response(body, {
                  status: 503, headers: {"Content-Type": "application/json"}}));
              }
              return realFetch.apply(this, arguments);
            };"""
        },
    )
    try:
        driver.get(server)
        _wait(driver, lambda d: "not answering" in _status(d))
        # Still failing when the person searches: the service's error, not "nothing".
        driver.execute_script("window.__listFailures = 1; window.__listError = 'still starting'")
        _search(driver, "password")
        assert _status(driver) == "The search service is not answering: still starting"
        # Answering again: the search runs, and the picker shows the collections.
        _search(driver, "forgot password")
        assert _status(driver).startswith("Results")
        assert driver.find_elements(By.CSS_SELECTOR, "#results .result")
        assert driver.find_element(By.ID, "picker").is_displayed()
    finally:
        driver.execute_cdp_cmd(
            "Page.removeScriptToEvaluateOnNewDocument", {"identifier": fail["identifier"]}
        )


def test_a_long_query_is_cut_between_characters(server: str, browser: Any) -> None:
    """Regression: a query from a link was cut at 4,096 UTF-16 units, which split an
    emoji there into half a character; the server reads 4,096 code points."""
    from urllib.parse import quote

    driver = browser
    query = "password " + "x" * 4086 + "\N{GRINNING FACE}"  # 4,096 code points
    driver.get(server + "?corpus=help&q=" + quote(query))
    _wait(driver, _settled)
    assert _status(driver).startswith("Results")
    # Compared in the page: WebDriver cannot even hand back a string with half an emoji.
    assert driver.execute_script(
        "const typed = document.getElementById('q').value;"
        "return typed.isWellFormed() && typed === arguments[0]",
        query,
    )


def test_the_query_is_isolated_in_the_status_sentence(server: str, browser: Any) -> None:
    """A direction override in the query must not reorder the sentence around it."""
    from urllib.parse import quote

    from selenium.webdriver.common.by import By

    driver = browser
    driver.get(server + "?corpus=help&q=" + quote("\u202ezebra 123"))
    _wait(driver, _settled)
    isolated = driver.find_element(By.CSS_SELECTOR, "#status bdi")
    assert isolated.get_attribute("textContent") == "\u202ezebra 123"


def test_a_link_with_only_spaces_in_q_shows_the_start_page(server: str, browser: Any) -> None:
    """Regression: ``?q=%20%20%20`` was not trimmed (a typed query is), so it searched
    for nothing and said 'No results for “”' instead of showing the empty start page."""
    from selenium.webdriver.common.by import By

    driver = browser
    driver.get(server + "?q=%20%20%20&corpus=help")
    # The start page moves the focus to the box; a search would say something instead.
    _wait(driver, lambda d: d.switch_to.active_element.get_attribute("id") == "q" or _settled(d))
    assert _status(driver) == ""
    assert not driver.find_elements(By.CSS_SELECTOR, "#results .result")
    assert driver.find_element(By.ID, "q").get_attribute("value") == ""
    driver.get(server + "?q=%20relativeurl%20&corpus=help")  # spaces around a word: trimmed
    _wait(driver, _settled)
    assert _status(driver).startswith("Results 1–1 for “relativeurl”")


def test_a_relative_document_url_is_text_not_a_link_to_this_server(
    server: str, browser: Any
) -> None:
    """Regression: a relative URL (the README's own ``url="/help/reset"``) was resolved
    against the search page and became a link to the Tandem server, which answered 404."""
    from selenium.webdriver.common.by import By

    driver = browser
    driver.get(server + "?q=relativeurl&corpus=help")
    _wait(driver, lambda d: _status(d).startswith("Results"))
    result = driver.find_elements(By.CSS_SELECTOR, "#results .result")[0]
    heading = result.find_element(By.CSS_SELECTOR, "h2")
    assert heading.text == "Your API token" and not heading.find_elements(By.CSS_SELECTOR, "a")
    assert result.find_element(By.CSS_SELECTOR, ".url").text == "/help/token"
    assert not driver.find_elements(By.CSS_SELECTOR, "#results a[href^='" + server + "']")


def test_words_with_combining_marks_are_marked(server: str, browser: Any) -> None:
    """Regression: a word was letters and digits only, so a Devanagari word fell apart at
    its vowel signs (combining marks) and "café" typed precomposed never matched the
    stored "cafe\u0301": nothing was marked."""
    from urllib.parse import quote

    from selenium.webdriver.common.by import By

    driver = browser
    driver.get(server + "?corpus=help&q=" + quote("café हिन्दी"))
    _wait(driver, lambda d: _status(d).startswith("Results"))
    result = driver.find_elements(By.CSS_SELECTOR, "#results .result")[0]
    assert result.find_element(By.CSS_SELECTOR, "h2").text == "Opening hours"
    marks = [m.get_attribute("textContent") for m in result.find_elements(By.CSS_SELECTOR, "mark")]
    assert marks == ["caf\u00e9", "हिन्दी"]  # the excerpt is shown in NFC
