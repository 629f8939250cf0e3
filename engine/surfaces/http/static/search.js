// Tandem search page. Talks to the /v1 API of the server that served it.
// Every string from the index (titles, URLs, excerpts) is inserted as text, never as
// HTML, and only absolute http(s) URLs become links. State lives in the address bar
// (?q=...&corpus=...&page=N) so Back, Forward and reloads work.
"use strict";

(function () {
  const PAGE_SIZE = 10;
  const MAX_OFFSET = 1000;
  const MAX_PAGE = Math.floor(MAX_OFFSET / PAGE_SIZE) + 1; // the last page the API reaches
  const MAX_QUERY_CHARS = 4096; // the server reads no more of a query (sparse.MAX_QUERY_LENGTH)
  const MAX_TERM_CHARS = 64; // longer words are searched, not highlighted
  // Marks, embeddings, overrides and isolates: text that reorders the text around it.
  const DIRECTION_CONTROLS = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

  const form = document.getElementById("search-form");
  const input = document.getElementById("q");
  const picker = document.getElementById("picker");
  const select = document.getElementById("corpus");
  const status = document.getElementById("status");
  const results = document.getElementById("results");
  const pager = document.getElementById("pager");
  const prev = document.getElementById("prev");
  const next = document.getElementById("next");
  const pageLabel = document.getElementById("page-label");

  let corpora = null; // the collections' names; null until the server has listed them
  let current = null; // {q, corpus, page}
  let shownSearch = window.location.search; // the "?q=…" part the page last followed or wrote
  let generation = 0; // drops answers to superseded searches

  // `parts`: a string, or a list of strings and nodes.
  function say(parts, isError) {
    status.replaceChildren(...[].concat(parts));
    status.classList.toggle("error", Boolean(isError));
  }

  // What someone typed, inside a sentence: isolated in <bdi>, so right-to-left words or a
  // direction override in it cannot reorder the sentence around it.
  function quoted(text) {
    const bdi = document.createElement("bdi");
    bdi.textContent = text;
    return ["“", bdi, "”"];
  }

  // The server reads the first MAX_QUERY_CHARS code points of a query. Cut the same way:
  // cutting UTF-16 units could split an emoji into half a character.
  function cutQuery(text) {
    return Array.from(text).slice(0, MAX_QUERY_CHARS).join("");
  }

  // Only an absolute http(s) URL is a link. A relative one ("/help/reset") names a page
  // of the site the documents came from, which this page cannot know: resolved against
  // this server it led to the search service's own 404. It is shown as text.
  function safeHref(url) {
    if (typeof url !== "string" || url.trim() === "") return null;
    let parsed;
    try {
      parsed = new URL(url); // no base: a relative URL throws
    } catch (err) {
      return null;
    }
    return parsed.protocol === "http:" || parsed.protocol === "https:" ? parsed.href : null;
  }

  // A word: letters, combining marks and digits. Without the marks a Devanagari word
  // ("हिन्दी") fell apart at its vowel signs and was never marked. Query and excerpt are
  // compared in NFC, so "café" typed precomposed marks "cafe\u0301" stored decomposed.
  const WORD_CHAR = "[\\p{L}\\p{M}\\p{N}]";

  // The words to highlight: at most 20, each 2..MAX_TERM_CHARS long (a crafted link with
  // one 50,000-letter word made a regular expression too large to compile, and the page
  // stayed on "Searching…").
  function queryTerms(query) {
    const word = new RegExp(WORD_CHAR + "+", "gu");
    const words = query.normalize("NFC").toLowerCase().match(word) || [];
    const usable = words.filter((w) => w.length >= 2 && w.length <= MAX_TERM_CHARS);
    return Array.from(new Set(usable)).slice(0, 20);
  }

  function escapeRegExp(text) {
    return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  }

  // Appends `text` (in NFC) to `parent`, wrapping each word that starts with a query term
  // in <mark> (the whole word: "passwords" for the term "password").
  function appendMarked(parent, raw, terms) {
    const text = raw.normalize("NFC");
    if (!terms.length) {
      parent.appendChild(document.createTextNode(text));
      return;
    }
    const pattern = new RegExp(
      "(?<!" + WORD_CHAR + ")(?:" + terms.map(escapeRegExp).join("|") + ")" + WORD_CHAR + "*",
      "giu"
    );
    let last = 0;
    for (const match of text.matchAll(pattern)) {
      if (match.index > last) {
        parent.appendChild(document.createTextNode(text.slice(last, match.index)));
      }
      const mark = document.createElement("mark");
      mark.textContent = match[0];
      parent.appendChild(mark);
      last = match.index + match[0].length;
    }
    if (last < text.length) parent.appendChild(document.createTextNode(text.slice(last)));
  }

  function renderResult(passage, terms) {
    const item = document.createElement("li");
    item.className = "result";
    const heading = document.createElement("h2");
    const title = passage.title && passage.title.trim() ? passage.title : passage.source_id;
    const href = safeHref(passage.url);
    if (href) {
      const link = document.createElement("a");
      link.href = href;
      link.rel = "noopener noreferrer";
      link.textContent = title;
      heading.appendChild(link);
    } else {
      heading.textContent = title;
    }
    item.appendChild(heading);
    if (passage.url) {
      // Show what the link opens (parsed, non-ASCII percent-encoded), not the stored
      // string: a direction override in it made ".../\u202egpj.exe" read as "exe.jpg".
      // A URL that is no link is shown without direction controls.
      const url = document.createElement("p");
      url.className = "url";
      url.dir = "ltr";
      url.textContent = href || passage.url.replace(DIRECTION_CONTROLS, "");
      item.appendChild(url);
    }
    if (passage.excerpt) {
      const excerpt = document.createElement("p");
      excerpt.className = "excerpt";
      appendMarked(excerpt, passage.excerpt, terms);
      item.appendChild(excerpt);
    }
    return item;
  }

  async function api(path, body) {
    const response = await fetch(path, {
      method: body === undefined ? "GET" : "POST",
      headers: body === undefined ? {} : { "Content-Type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    let payload = null;
    try {
      payload = await response.json();
    } catch (err) {
      payload = null;
    }
    if (!response.ok) {
      const message = payload && payload.error ? payload.error.message : response.statusText;
      throw new Error(message || "the server did not answer");
    }
    // A 200 that is no JSON object (a proxy's login page) is a failure too, not a
    // TypeError later that leaves the page on "Searching…".
    if (payload === null || typeof payload !== "object") {
      throw new Error("the server's answer could not be read");
    }
    return payload;
  }

  function readLocation() {
    const params = new URLSearchParams(window.location.search);
    const asked = parseInt(params.get("page") || "1", 10) || 1;
    const page = Math.min(MAX_PAGE, Math.max(1, asked)); // ?page=500 shows page 101 as 101
    // Trimmed as a typed query is (fromForm): "?q=%20%20" is the empty start page, not a
    // search for nothing that said 'No results for “”'. Then cut as the server reads it.
    const q = cutQuery((params.get("q") || "").trim());
    return { q: q, corpus: params.get("corpus") || "", page: page };
  }

  function writeLocation(state, replace) {
    const params = new URLSearchParams();
    params.set("q", state.q);
    if (corpora.length > 1) params.set("corpus", state.corpus);
    if (state.page > 1) params.set("page", String(state.page));
    const url = "?" + params.toString();
    // The same search again replaces its entry: Back should not step through copies.
    if (replace || url === window.location.search) window.history.replaceState(null, "", url);
    else window.history.pushState(null, "", url);
    shownSearch = window.location.search;
  }

  function showPager(page, hasNext) {
    prev.disabled = page <= 1;
    next.disabled = !hasNext;
    pageLabel.textContent = "Page " + page;
    pager.hidden = page <= 1 && !hasNext;
  }

  // `turning`: a page turn. Its pager stays in place, disabled, while the page loads
  // (hiding the button that has the focus would drop the focus to <body>), and the focus
  // then moves to the new page, or to the status when it failed.
  async function run(state, turning) {
    const mine = ++generation;
    current = state;
    results.replaceChildren();
    prev.disabled = next.disabled = true;
    if (!turning) pager.hidden = true;
    if (!state.corpus) {
      pager.hidden = true;
      say("There is nothing to search yet.");
      return;
    }
    say("Searching…");
    const offset = Math.min((state.page - 1) * PAGE_SIZE, MAX_OFFSET);
    let payload;
    try {
      payload = await api("/v1/corpora/" + encodeURIComponent(state.corpus) + "/search", {
        query: state.q,
        top_k: PAGE_SIZE + 1,
        offset: offset,
      });
    } catch (err) {
      if (mine !== generation) return;
      say("The search failed: " + err.message, true);
      showPager(state.page, false);
      if (turning) status.focus();
      return;
    }
    if (mine !== generation) return;
    const passages = payload.passages || [];
    const shown = passages.slice(0, PAGE_SIZE);
    const terms = queryTerms(state.q);
    for (const passage of shown) results.appendChild(renderResult(passage, terms));
    if (!shown.length) {
      say(
        state.page > 1
          ? ["No more results for ", ...quoted(state.q), "."]
          : ["No results for ", ...quoted(state.q), ". Try other or fewer words."]
      );
    } else {
      const first = offset + 1;
      const last = offset + shown.length;
      say(["Results " + first + "–" + last + " for ", ...quoted(state.q), "."]);
    }
    showPager(state.page, passages.length > PAGE_SIZE && offset + PAGE_SIZE <= MAX_OFFSET);
    if (turning) results.focus();
  }

  function fromForm(page) {
    const q = cutQuery(input.value.trim());
    return { q: q, corpus: select.value || corpora[0] || "", page: page };
  }

  // Fetches the list of collections unless it is already here: one failure at load (a
  // restart, a blip) must not break the page until a reload. False when it failed, said.
  async function listCorpora() {
    if (corpora) return true;
    let names;
    try {
      names = (await api("/v1/corpora")).corpora || [];
    } catch (err) {
      if (!corpora) say("The search service is not answering: " + err.message, true);
      return Boolean(corpora);
    }
    if (corpora) return true; // another call listed them meanwhile
    corpora = names;
    for (const name of corpora) {
      const option = document.createElement("option");
      option.value = name;
      option.textContent = name;
      select.appendChild(option);
    }
    picker.hidden = corpora.length < 2;
    return true;
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (!(await listCorpora())) return;
    const state = fromForm(1);
    if (state.q.length === 0) {
      say("Type what you are looking for.");
      input.focus();
      return;
    }
    writeLocation(state, false);
    run(state, false);
  });

  function turn(delta) {
    if (!current) return;
    const state = { q: current.q, corpus: current.corpus, page: current.page + delta };
    writeLocation(state, false);
    run(state, true);
  }
  prev.addEventListener("click", () => turn(-1));
  next.addEventListener("click", () => turn(1));

  // Shows what the address asks for: at load, and on Back and Forward.
  function follow() {
    const state = readLocation();
    shownSearch = window.location.search;
    input.value = state.q;
    if (!corpora.length) {
      say("There is nothing to search yet.");
      return;
    }
    const gone = Boolean(state.corpus) && !corpora.includes(state.corpus);
    picker.hidden = corpora.length < 2 && !gone;
    if (gone) {
      // A link to a collection that is gone (or Back to it): say so rather than search
      // another one, and let no search still under way overwrite that.
      generation++;
      current = state;
      results.replaceChildren();
      pager.hidden = true;
      say(["There is no collection named ", ...quoted(state.corpus), " any more; pick one."], true);
      input.focus();
      return;
    }
    if (state.corpus) select.value = state.corpus;
    if (state.q) run(fromForm(state.page), false);
    else {
      generation++;
      current = null;
      results.replaceChildren();
      pager.hidden = true;
      say("");
      input.focus();
    }
  }

  window.addEventListener("popstate", async () => {
    // Only the fragment changed (the "Skip to results" link, or Back from it): the search
    // on screen is the one asked for, and what is being typed stays.
    if (window.location.search === shownSearch) return;
    shownSearch = window.location.search;
    if (await listCorpora()) follow();
  });

  async function start() {
    if (await listCorpora()) follow();
  }

  start();
})();
