"""Excerpts (pure) and the analyzer map."""

from __future__ import annotations

import re
import unicodedata

import pytest
import regex
import tantivy
from hypothesis import given
from hypothesis import strategies as st

from sparse.analyzers import (
    DEFAULT_LANGUAGE_ANALYZERS,
    FALLBACK_ANALYZER,
    MAX_TOKEN_BYTES,
    Analyzer,
    LanguageAnalyzers,
)
from sparse.contracts import MAX_EXCERPT_LENGTH
from sparse.excerpt import make_excerpt


def test_short_text_is_its_own_excerpt() -> None:
    assert make_excerpt("short text", ["text"]) == "short text"


def test_window_surrounds_the_first_term_that_occurs() -> None:
    text = "alpha " * 100 + "needle in context " + "omega " * 100
    excerpt = make_excerpt(text, ["absent", "needle"])
    assert "needle in context" in excerpt
    assert len(excerpt) <= MAX_EXCERPT_LENGTH
    assert not excerpt.startswith(" ") and not excerpt.endswith(" ")


def test_terms_match_as_word_prefixes_case_insensitively() -> None:
    text = "x" * 400 + " scattered " + "filler " * 20 + " Studies show things " + "y" * 400
    excerpt = make_excerpt(text, ["studi"])  # a stem; "scattered" must not match "tter"
    assert "Studies show" in excerpt


def test_earlier_terms_win_over_earlier_positions() -> None:
    text = "common " + "pad " * 150 + "rare " + "pad " * 150
    assert "rare" in make_excerpt(text, ["rare", "common"])
    assert make_excerpt(text, ["common", "rare"]).startswith("common")


def test_an_unaccented_term_finds_its_accented_form_where_it_is() -> None:
    text = "pad " * 150 + "Ménière's disease, naïve patients" + " pad" * 150
    excerpt = make_excerpt(text, ["menier", "meniere"])
    assert "Ménière's disease" in excerpt  # the text as written, around the folded match
    assert "naïve patients" in make_excerpt(text, ["naiv"])
    assert make_excerpt(text, ["ménière"]) == excerpt  # the accented form as before
    # letters that fold to two (æ, ß) are not matched; the start is shown
    assert make_excerpt("pad " * 150 + "Æsir", ["aesir"]).startswith("pad")


@pytest.mark.parametrize(
    ("written", "term"),
    [("Øresund", "oresund"), ("Łódź", "lodz"), ("Ｔａｒｇｅｔ", "target"), ("Đakovo", "dakovo")],
)
def test_letters_the_index_folds_without_a_decomposition_anchor_too(
    written: str, term: str
) -> None:
    """Regression: the index matched these (tantivy folds them) but the excerpt did not
    find them and showed the start of the text."""
    text = "pad " * 150 + f"{written} is here" + " pad" * 150
    assert f"{written} is here" in make_excerpt(text, [term])


def test_the_first_term_anchors_even_where_only_its_folded_form_occurs() -> None:
    """Regression: the folded copy was searched only when no term occurred as written,
    so a rarer term the document spells with accents lost to a common one ("meniere
    disease" anchored on "disease" though the index ranked on "Ménière")."""
    pad = "lorem ipsum dolor sit amet " * 30
    text = "The disease is common. " + pad + "Ménière described it first in 1861. " + pad
    assert "Ménière described" in make_excerpt(text, ["menier", "diseas"])
    assert make_excerpt(text, ["zzz", "diseas"]).startswith("The disease")


_FOLDER = (
    tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace())
    .filter(tantivy.Filter.ascii_fold())
    .build()
)


def _index_folds(letter: str) -> str:
    """What the index's folding (the English chain's ``ascii_fold``) makes of ``letter``."""
    return "".join(_FOLDER.analyze(letter))


def test_every_letter_the_index_folds_to_one_anchors_its_word() -> None:
    """Regression: only Latin-1, Latin Extended-A/B and fullwidth letters were folded,
    so "nguyen" (which the index finds in "Nguyễn") showed the start of the text. Every
    lowercase letter the index folds to one ASCII letter or digit now anchors, asked of
    tantivy letter by letter (Vietnamese, Latin Extended Additional, -C, -D, IPA...)."""
    pad = "pad " * 150
    letters = [
        letter
        for letter in map(chr, range(0x80, 0x10000))
        if letter == letter.lower()
        and not letter.isspace()
        and not 0xD800 <= ord(letter) <= 0xDFFF
        and (form := _index_folds(letter)) != letter
        and len(form) == 1
        and form.isascii()
        and form == form.lower()
        and form.isalnum()
    ]
    assert "ễ" in letters and "ḍ" in letters and "ⱥ" in letters and len(letters) > 500
    missed = [
        letter
        for letter in letters
        if f"{letter}qz here"
        not in make_excerpt(f"{pad}{letter}qz here{pad}", [f"{_index_folds(letter)}qz"])
    ]
    assert missed == []
    text = f"{pad}Ông Nguyễn Văn A là giám đốc.{pad}"
    assert "Nguyễn Văn" in make_excerpt(text, ["nguyen"])


def test_a_whole_word_wins_over_a_longer_word_it_begins() -> None:
    """Regression: "cat" anchored on "category" though "cat" itself came soon after;
    a stem, never a whole word, still anchors on its first occurrence."""
    pad = "lorem ipsum dolor sit amet " * 20
    text = f"{pad}This category of problems {pad} the cat sat on the mat {pad}"
    assert "the cat sat" in make_excerpt(text, ["cat"])
    assert "category of" in make_excerpt(text, ["categ"])
    # the same for a folded match
    accented = text.replace("category", "càtegory").replace("the cat", "the càt")
    assert "the càt sat" in make_excerpt(accented, ["cat"])
    # looked for among a few occurrences only: each look is a scan on the hot path
    many = f"{pad}{'categories ' * 40}{pad} the cat sat {pad}"
    assert "categories" in make_excerpt(many, ["cat"])


def _word(length: int, seed: int) -> str:
    """A word of ``length`` ASCII letters no other test uses (so no cache has it)."""
    return "".join(chr(ord("a") + (index * 7 + seed) % 26) for index in range(length))


@pytest.fixture
def compiled_classes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of character classes of each ``re`` pattern compiled while the test
    runs (a fold pattern is one class per letter it spells out)."""
    import sparse.excerpt as excerpt_module

    excerpt_module._foldable()  # the one class of every foldable letter, compiled once
    counts: list[int] = []
    compile_ = re.compile

    def recording(pattern: str, flags: int = 0) -> re.Pattern[str]:
        counts.append(pattern.count("["))
        return compile_(pattern, flags)

    monkeypatch.setattr(re, "compile", recording)
    return counts


def test_a_word_longer_than_the_index_keeps_is_never_compiled_folded(
    compiled_classes: list[int],
) -> None:
    """Regression: a query word the index drops (``MAX_TOKEN_BYTES`` or more) reached
    the excerpts (the engine's own cut keeps words of 2,000 characters), and every text
    with accents compiled it into a fold pattern of one ~40-character class a letter:
    200 ms and 1.2 MB for 2,000 letters, held by two caches (466 MB after 400 distinct
    queries). The index cannot have found such a word folded: nothing is compiled nor
    cached for it, and as written it still anchors."""
    text = "Crème brûlée à la française, " * 40
    for length in (MAX_TOKEN_BYTES, 300, 2_000):
        word = _word(length, seed=length)
        assert make_excerpt(text, [word]).startswith("Crème brûlée")
        written = f"{text}{word} is here {text}"
        assert f"française, {word[:20]}" in make_excerpt(written, [word])
    assert compiled_classes == []


def test_the_longest_word_the_index_keeps_anchors_where_only_its_folded_form_occurs(
    compiled_classes: list[int],
) -> None:
    """A 159-letter word found only with accents anchors there, after a word that
    differs from it at one letter; nothing is compiled for it (a pattern per term cost
    ~15 ms and ~200 KB at that length, held by two caches)."""
    word = _word(MAX_TOKEN_BYTES - 1, seed=3)
    accented = word.replace("e", "ễ").replace("u", "ü").replace("a", "à")
    assert accented[:8] != word[:8] and accented[-10:] != word[-10:]
    near_miss = accented[:100] + "q" + accented[101:]
    pad = "lorem ipsum dolor sit amet " * 20
    text = f"{pad}{near_miss} first {pad}{accented} here {pad}"
    assert f"{accented[-10:]} here" in make_excerpt(text, [word])
    assert compiled_classes == []


def test_a_text_is_folded_once_an_excerpt_and_not_at_all_without_accents(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Regression: each term missing as written was looked for with a pattern scan of the
    whole text, in every text that was not pure ASCII — scientific abstracts with a Greek
    letter or a dash included — and the keyword search over SciFact went from 1.05× to
    3.96× raw tantivy. The folded copy is made once an excerpt, and only when the text
    holds a character the index folds."""
    import sparse.excerpt as excerpt_module

    folded_texts: list[str] = []
    fold = excerpt_module._folded

    def counting(text: str) -> str:
        result = fold(text)
        if len(text) > 50:
            folded_texts.append(text)
        return result

    monkeypatch.setattr(excerpt_module, "_folded", counting)
    pad = "β-amyloid levels rose by 5 – 10 µg in the cohort " * 20
    missing = ["zzz", "qqq", "xxyy", "wvw"]
    assert make_excerpt(pad + " the disease " + pad, [*missing, "diseas"])
    assert len(folded_texts) == 1
    assert fold(folded_texts[0].lower()) == folded_texts[0].lower()  # nothing to fold
    folded_texts.clear()
    text = pad + " Ménière disease " + pad
    assert "Ménière" in make_excerpt(text, [*missing, "menier"])
    assert len(folded_texts) == 1


@pytest.mark.parametrize("prefix", range(0, 40))
@pytest.mark.parametrize(
    "unit",
    [
        "q\u0301",  # a letter and an accent with no composed form
        "\U0001f469\u200d\U0001f469\u200d\U0001f467",  # an emoji family, joined
        "\U0001f1eb\U0001f1f7",  # a flag: two regional indicators
        "\U0001f44d\U0001f3fd",  # a thumbs-up and its skin tone
        "\u0915\u094d\u0937",  # a Devanagari conjunct (ka, virama, ssa)
    ],
    ids=["accent", "family", "flag", "skin-tone", "conjunct"],
)
def test_an_excerpt_never_cuts_a_character_the_reader_sees_as_one(prefix: int, unit: str) -> None:
    """Regression: without a space nearby the window edge split a letter from its accent
    (an excerpt began with a lone U+0301), a flag in two, an emoji from its modifier."""
    excerpt = make_excerpt("q" * prefix + unit * 200, ["zz"], 50)
    assert excerpt and set(regex.findall(r"\X", excerpt)) <= {"q", unit}, excerpt


def test_a_decomposed_match_anchors_and_shows_composed() -> None:
    """The analyzers read text composed (NFC), so the index finds "meniere" in a text
    written with combining accents; the excerpt found the start instead."""
    text = "pad " * 150 + unicodedata.normalize("NFD", "Ménière disease") + " pad" * 150
    assert "Ménière disease" in make_excerpt(text, ["menier"])


def test_a_character_whose_lowercase_is_longer_keeps_matching_case_insensitive() -> None:
    text = "İstanbul. " + "lorem ipsum " * 60 + "Zebra crossings are striped."
    assert "Zebra crossings" in make_excerpt(text, ["zebra"])


def test_cjk_terms_anchor_inside_running_text() -> None:
    weather = "今日は天気が良いです。" * 60
    text = weather + "東京タワーに行きました。" + weather
    assert "タワー" in make_excerpt(text, ["タ"])
    assert "東京" in make_excerpt(text, ["東"])


def test_occurrences_inside_words_are_skipped_up_to_a_bound() -> None:
    inside = "x" + "stud" * 20 + " "  # twenty occurrences of "stud", none at a word start
    text = "pad " * 100 + inside + "students " + "pad " * 100
    assert "students" in make_excerpt(text, ["stud"])
    # A megabyte of one letter: the term is given up after a bounded number of looks
    # and the next term anchors the excerpt.
    blob = "x" + "a" * 1_000_000 + " zebra " + "pad " * 100
    assert "zebra" in make_excerpt(blob, ["aa", "zebra"])


def test_no_match_gives_the_start() -> None:
    text = "Beginning words. " + "more " * 200
    assert make_excerpt(text, ["zzz"]).startswith("Beginning words.")


def test_a_match_at_the_very_end_still_fits() -> None:
    text = "pad " * 200 + "finale"
    excerpt = make_excerpt(text, ["finale"])
    assert excerpt.endswith("finale")
    assert len(excerpt) <= MAX_EXCERPT_LENGTH


def test_invalid_max_length() -> None:
    with pytest.raises(ValueError):
        make_excerpt("text", [], max_length=0)


@given(st.text(max_size=2_000), st.lists(st.text(max_size=8), max_size=5), st.integers(1, 400))
def test_excerpt_is_bounded_substring(text: str, terms: list[str], max_length: int) -> None:
    excerpt = make_excerpt(text, [t.lower() for t in terms], max_length)
    assert len(excerpt) <= max_length
    assert excerpt in text


def test_analyzer_from_str_and_its_error_lists_valid_values() -> None:
    assert Analyzer.from_str("EN") is Analyzer.ENGLISH
    assert Analyzer.from_str("german") is Analyzer.GERMAN
    with pytest.raises(ValueError, match=r"en, de, fr, es, .*, ru, simple, cjk"):
        Analyzer.from_str("klingon")


def test_each_analyzer_has_its_own_field_and_tokenizer() -> None:
    assert len({a.field_name for a in Analyzer}) == len(Analyzer)
    assert len({a.tokenizer_name for a in Analyzer}) == len(Analyzer)


@pytest.mark.parametrize(
    ("analyzer", "text", "expected"),
    [
        (Analyzer.ENGLISH, "The Studies of running", ["studi", "run"]),
        (Analyzer.GERMAN, "Die Häuser und Katzen", ["haus", "katz"]),
        # each language: its stop words gone, its Snowball stemmer
        (Analyzer.FRENCH, "L'homme et les chevaux", ["homm", "cheval"]),
        (Analyzer.SPANISH, "Los caballos y las casas", ["caball", "cas"]),
        (Analyzer.ITALIAN, "Gli uomini e le case", ["uomin", "cas"]),
        (Analyzer.PORTUGUESE, "Os cavalos e as casas", ["caval", "cas"]),
        (Analyzer.DUTCH, "De paarden en de huizen", ["paar", "huis"]),
        (Analyzer.SWEDISH, "Hästarna och husen", ["häst", "hus"]),
        (Analyzer.NORWEGIAN, "Hestene og husene", ["hest", "hus"]),
        (Analyzer.DANISH, "Hestene og husene", ["hest", "hus"]),
        (Analyzer.FINNISH, "Hevoset ja talot", ["hevos", "talo"]),
        (Analyzer.HUNGARIAN, "A lovak és a házak", ["lov", "ház"]),
        (Analyzer.RUSSIAN, "Лошади и дома", ["лошад", "дом"]),
        (Analyzer.SIMPLE, "The Studies", ["the", "studies"]),
        (Analyzer.CJK, "東京 Tower", ["東", "京", "tower"]),
        (Analyzer.ENGLISH, "x" * 10_000, []),
        # the long-token cut counts bytes: 40 of them dropped everyday words of other scripts
        (Analyzer.ENGLISH, "x" * 159, ["x" * 159]),
        (Analyzer.ENGLISH, "x" * 160, []),
        (Analyzer.RUSSIAN, "достопримечательность", ["достопримечательн"]),
        (
            Analyzer.GERMAN,
            "Rindfleischetikettierungsüberwachungsaufgabenübertragungsgesetz",
            ["rindfleischetikettierungsuberwachungsaufgabenubertragungsgesetz"],
        ),
        # Latin and digit runs stop where the unigram scripts start; marks stay in words
        (Analyzer.CJK, "iPhone用の充電器", ["iphone", "用", "の", "充", "電", "器"]),
        (Analyzer.CJK, "Python入门 2024年", ["python", "入", "门", "2024", "年"]),
        (Analyzer.CJK, "हिन्दी भाषा", ["हिन्दी", "भाषा"]),
        # folded to ASCII before stemming: accents or not, one term
        (Analyzer.ENGLISH, "Ménière NAÏVE Sjögren café", ["menier", "naiv", "sjogren", "cafe"]),
        (Analyzer.ENGLISH, "meniere naive sjogren cafe", ["menier", "naiv", "sjogren", "cafe"]),
        (Analyzer.ENGLISH, "IL-1β 200Å", ["il", "1β", "200a"]),  # Greek letters stay
    ],
)
def test_analysis_chains(analyzer: Analyzer, text: str, expected: list[str]) -> None:
    assert analyzer.build().analyze(text) == expected


@pytest.mark.parametrize("analyzer", list(Analyzer))
def test_decomposed_text_analyses_as_its_composed_form(analyzer: Analyzer) -> None:
    """Regression: "Ménière" spelled with combining accents (macOS file names, some PDF
    extractions) was split at each accent, so it matched neither "Ménière" nor "meniere"."""
    composed = "Ménière naïve Sjögren Ålesund Häuser"
    decomposed = unicodedata.normalize("NFD", composed)
    assert decomposed != composed
    chain = analyzer.build()
    assert chain.analyze(analyzer.prepare(decomposed)) == chain.analyze(analyzer.prepare(composed))


def test_default_map_and_fallback() -> None:
    analyzers = LanguageAnalyzers()
    assert dict(analyzers.by_language) == dict(DEFAULT_LANGUAGE_ANALYZERS) == {0: Analyzer.ENGLISH}
    assert analyzers.for_language(0) is Analyzer.ENGLISH
    assert analyzers.for_language(12345) is FALLBACK_ANALYZER is Analyzer.CJK


def test_the_map_is_copied_and_frozen() -> None:
    source = {0: Analyzer.ENGLISH, 1: Analyzer.GERMAN}
    analyzers = LanguageAnalyzers(source)
    source[1] = Analyzer.SIMPLE
    assert analyzers.for_language(1) is Analyzer.GERMAN
    with pytest.raises(TypeError):
        analyzers.by_language[2] = Analyzer.CJK  # type: ignore[index]


@pytest.mark.parametrize(
    "bad", [{-1: Analyzer.ENGLISH}, {"0": Analyzer.ENGLISH}, {0: "en"}, {True: Analyzer.GERMAN}]
)
def test_invalid_maps_raise_value_error(bad: dict[object, object]) -> None:
    with pytest.raises(ValueError):
        LanguageAnalyzers(bad)  # type: ignore[arg-type]


def test_a_language_s_plural_finds_its_singular() -> None:
    pairs = {
        Analyzer.FRENCH: ("chevaux", "cheval"),
        Analyzer.SPANISH: ("casas", "casa"),
        Analyzer.ITALIAN: ("case", "casa"),
        Analyzer.PORTUGUESE: ("cavalos", "cavalo"),
        Analyzer.RUSSIAN: ("лошади", "лошадь"),
        Analyzer.GERMAN: ("Katzen", "Katze"),
    }
    for analyzer, (plural, singular) in pairs.items():
        chain = analyzer.build()
        assert chain.analyze(plural) == chain.analyze(singular) != [], analyzer


def test_an_index_keeps_fields_only_for_the_analyzers_it_routes_to() -> None:
    default = LanguageAnalyzers()
    assert default.routed == (Analyzer.ENGLISH, FALLBACK_ANALYZER)
    mixed = LanguageAnalyzers({0: Analyzer.ENGLISH, 3: Analyzer.FRENCH, 4: Analyzer.FRENCH})
    assert mixed.routed == (Analyzer.ENGLISH, Analyzer.FRENCH, Analyzer.CJK)  # enum order
    assert LanguageAnalyzers({0: Analyzer.CJK}).routed == (Analyzer.CJK,)
