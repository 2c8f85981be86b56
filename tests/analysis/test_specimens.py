"""The representative instance of each registered encoding."""

from __future__ import annotations

import posenc
from posenc.analysis import SPECIMEN_KWARGS, specimen_arguments


def test_the_former_specimen_table_reads_each_encodings_own_arguments():
    assert set(SPECIMEN_KWARGS) == set(posenc.available())
    assert SPECIMEN_KWARGS["rope"] == specimen_arguments("rope") == {"d_head": 64}
    assert "nosuch" not in SPECIMEN_KWARGS
