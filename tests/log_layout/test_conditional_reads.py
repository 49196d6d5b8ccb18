"""``Store.read_if_changed`` and the tag ``put_replace`` returns, on every backend
(issue 33: pollers follow documents by conditional reads, not by re-reading them)."""

from __future__ import annotations

import pytest

from log_layout import open_store


@pytest.fixture
def st(store):
    url, options = store
    return open_store(url, storage_options=options)


def test_an_unchanged_document_reads_as_none_and_a_replaced_one_as_its_bytes(st):
    st.put_replace("docs/a.json", b"one")
    data, tag = st.read_if_changed("docs/a.json", None)
    assert data == b"one" and tag
    assert st.read_if_changed("docs/a.json", tag) == (None, tag)
    st.put_replace("docs/a.json", b"two, longer")
    data, tag2 = st.read_if_changed("docs/a.json", tag)
    assert data == b"two, longer" and tag2 != tag
    assert st.read_if_changed("docs/a.json", tag2) == (None, tag2)
    # a tag from elsewhere (another file's) is just a tag that does not match
    st.put_replace("docs/b.json", b"b")
    assert st.read_if_changed("docs/b.json", tag2)[0] == b"b"


def test_the_tag_put_replace_returns_names_what_it_wrote(st):
    tag = st.put_replace("docs/mine.json", b"mine")
    if tag is None:  # this store cannot tell without asking (HDFS): a plain read then
        pytest.skip(f"{type(st).__name__}.put_replace returns no tag")
    assert st.read_if_changed("docs/mine.json", tag) == (None, tag)
    st.put_replace("docs/mine.json", b"someone else's")
    assert st.read_if_changed("docs/mine.json", tag)[0] == b"someone else's"


def test_an_absent_document_is_file_not_found(st):
    with pytest.raises(FileNotFoundError):
        st.read_if_changed("docs/none.json", None)
    with pytest.raises(FileNotFoundError):
        st.read_if_changed("docs/none.json", "some-old-tag")


def test_listing_a_missing_folder_is_empty_and_reads_stay_whole(st):
    assert st.list("never/made") == [] and st.list_folders("never/made") == []
    st.put_replace("f/x.json", b"x" * 10)
    assert st.read("f/x.json") == b"x" * 10
    assert bytes(st.read_buffer("f/x.json", 4)) == b"xxxx"
