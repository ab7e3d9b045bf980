"""placement.path_matches: a pair's one-sided declarations are globs read in the one dotted spelling."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from comparisons.placement import path_matches

NAMES = st.text("abcdefgh_", min_size=1, max_size=6)
SEGMENTS = st.lists(st.one_of(NAMES, st.integers(0, 99).map(str)), min_size=2, max_size=5)


def python_spelling(segments: list[str]) -> str:
    """"out['a'][3]"-style: the first segment bare, then each name in quotes, each number as an index."""
    return segments[0] + "".join(f"[{s}]" if s.isdigit() else f"['{s}']" for s in segments[1:])


@given(SEGMENTS)
def test_a_path_matches_itself_in_every_spelling(segments):
    dotted, slashed = ".".join(segments), "/".join(segments)
    for path in (dotted, slashed, python_spelling(segments)):
        for pattern in (dotted, slashed, python_spelling(segments)):
            assert path_matches(path, [pattern]), (path, pattern)


@given(SEGMENTS, NAMES)
def test_a_wildcard_covers_what_lies_under_its_prefix_and_nothing_beside_it(segments, other):
    path = ".".join(segments)
    assert path_matches(path, ["zzz.never", f"{segments[0]}.*"])
    assert path_matches(path.replace(".", "/"), [f"{segments[0]}/*"])
    if other != segments[0]:
        assert not path_matches(path, [f"{other}.*"])
    assert not path_matches(path, [])
