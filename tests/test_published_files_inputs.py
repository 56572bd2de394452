"""A publisher's file is read through the one reader of a user's files, in a folder of them too."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from medpanel.experiments.errors import UserError
from medpanel.experiments.run.sources.published_files import read_rows

HEADER = "question,opa,opb,answer\n"


def test_a_fifo_named_like_a_csv_in_a_folder_is_refused_not_skipped_or_read(tmp_path: Path) -> None:
    (tmp_path / "cardiology_test.csv").write_text(HEADER + "Which?,a,b,A\n", encoding="utf-8")
    os.mkfifo(tmp_path / "neurology_test.csv")  # opening it for reading would block forever
    with pytest.raises(UserError) as err:
        read_rows(tmp_path, header=None, split="test")
    assert "neurology_test.csv" in str(err.value) and err.value.field == "dataset.path"


@pytest.mark.parametrize("name", ["medbullets_op5.csv", "test_set.json"])
def test_a_link_to_dev_zero_is_refused_before_a_byte_is_read(tmp_path: Path, name: str) -> None:
    link = tmp_path / name
    link.symlink_to("/dev/zero")
    with pytest.raises(UserError) as err:
        read_rows(link, header=None, split="test")
    assert err.value.field == "dataset.path"


def test_a_latin1_csv_is_one_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "mcq_test.csv"
    path.write_bytes((HEADER + "Caf\xe9?,a,b,A\n").encode("latin-1"))
    with pytest.raises(UserError) as err:
        read_rows(path, header=None, split="test")
    assert "mcq_test.csv" in str(err.value)
