

def test_lone_surrogates_are_replaced_not_fatal() -> None:
    from sparse.clamp import clamp_text

    assert clamp_text("ab\udcffcd") == "ab?cd"
    assert clamp_text("\ud800\ud800") == "??"
