"""Edges of `evaluators/sources.py` that a mutation sweep (stop 47) found unpinned: each change named in a
test's docstring passed tests/test_sources.py, tests/test_config.py, tests/test_textworld.py,
tests/test_adapters.py, tests/test_processing.py and tests/test_data_mutations.py. Local files only."""

from __future__ import annotations

import pytest

from evaluators.sources import SourceSpec, SourceSpecError, load_dataset_rows, same_number


def _rows(path):
    return load_dataset_rows(SourceSpec(kind="dataset", target=str(path), config={}))


def test_a_json_file_of_one_object_on_one_line_is_one_row(tmp_path):
    """One object on one line is a one-row JSON Lines file; the same object over two lines is one JSON
    document, not rows, and is refused with the fix (a line count >= 1 refused the one-line file)."""
    (tmp_path / "one.json").write_text('{"question": "1+1", "answer": "2"}')
    assert _rows(tmp_path / "one.json") == [{"question": "1+1", "answer": "2"}]
    (tmp_path / "two.json").write_text('{"question": "1+1",\n "answer": "2"}')
    with pytest.raises(SourceSpecError, match="two.json: one JSON object, not rows; write a list of objects or one "
                                              "object per line"):
        _rows(tmp_path / "two.json")


def test_a_row_that_is_not_an_object_is_refused_with_its_index(tmp_path):
    """A JSON list whose second entry is a number: refused at row 1 with the value shown (without the check it
    read as "cannot load dataset ...: 'int' object is not iterable")."""
    (tmp_path / "bad.json").write_text('[{"question": "1", "answer": "2"}, 3]')
    with pytest.raises(SourceSpecError, match=r"bad.json row 1: a row must be an object with the question and answer "
                                              r"columns \(got 3\)") as e:
        _rows(tmp_path / "bad.json")
    assert e.value.field == "dataset"


def test_a_dataset_file_of_another_suffix_is_refused_with_the_suffixes_read(tmp_path):
    (tmp_path / "rows.txt").write_text('{"question": "1", "answer": "2"}\n')
    with pytest.raises(SourceSpecError, match=r"rows.txt: a dataset file must end in \.parquet, \.json, \.jsonl, \.csv"):
        _rows(tmp_path / "rows.txt")


def test_numbers_a_relative_millionth_apart_are_the_same_and_further_apart_are_not():
    """`same_number`'s tolerance includes its bound: 1.5 and 1.4999985 differ by exactly 1e-6 of the larger
    (a strict `<` called them different); 1.5 and 1.4999984 differ by more."""
    assert same_number("1.5", "1.4999985") and same_number("1.4999985", "1.5")
    assert not same_number("1.5", "1.4999984")


def test_a_jsonl_source_with_no_rows_is_refused(tmp_path):
    """A JSONL file of blank lines only is "empty" when the project is checked, not a source of no items
    (a count started at 1, or the check skipped, let it through)."""
    from evaluators.sources import check_source_spec

    (tmp_path / "blank.jsonl").write_text("\n\n")
    with pytest.raises(SourceSpecError, match="blank.jsonl is empty") as e:
        check_source_spec(SourceSpec(kind="jsonl", target=str(tmp_path / "blank.jsonl"), config={}))
    assert e.value.field == "jsonl"


def test_a_saved_dataset_folder_of_splits_reads_the_split_asked_and_names_the_ones_it_has(tmp_path):
    """A `DatasetDict.save_to_disk` folder: `config.split` picks the rows; a split it lacks is refused with its
    splits listed (skipping the check indexed the dict with the missing key)."""
    import datasets

    rows = {"question": ["1+1", "2+2"], "answer": ["2", "4"]}
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows),
                          "test": datasets.Dataset.from_dict({k: v[:1] for k, v in rows.items()})}
                         ).save_to_disk(str(tmp_path / "saved"))
    got = load_dataset_rows(SourceSpec(kind="dataset", target=str(tmp_path / "saved"), config={"split": "test"}))
    assert [(r["question"], r["answer"]) for r in got] == [("1+1", "2")]
    with pytest.raises(SourceSpecError, match=r"has no split 'validation'; its splits: train, test \(config.split\)"):
        load_dataset_rows(SourceSpec(kind="dataset", target=str(tmp_path / "saved"), config={"split": "validation"}))
