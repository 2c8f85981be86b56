"""The relative-position claim of an encoding that counts positions from the content (CoPE): "contextual",
saying what the shift measured, and the counted positions analysis reads through the encoding's view."""

from __future__ import annotations

import pytest
import torch

from posenc.analysis import properties, specimen
from posenc.analysis.counting import SAMPLE_SENTENCE, sentence_counts
from posenc.analysis.verification import IDENTITY_TOLERANCE, relative
from posenc.encodings import ENCODINGS, available, describe
from posenc.encodings.capabilities import Capabilities, declare
from posenc.encodings.cope import ContextualPositionEncoding


class ReadsPositionsToo(ContextualPositionEncoding):
    """Counts from the content, and adds 0.1·(query position) to every term: the given positions are read."""

    def score_terms(self, q, k, q_positions, k_positions, *, project=None):
        terms = super().score_terms(q, k, q_positions, k_positions)
        return terms + 0.1 * q_positions.to(terms.dtype)[:, None]


class NotDeclaredContextual(ContextualPositionEncoding):
    """CoPE without its ``contextual_positions`` declaration."""

    capabilities = declare(contextual_positions=False)


def _specimen(cls):
    torch.manual_seed(0)
    return cls(**describe("cope").specimen_arguments(ContextualPositionEncoding)).eval()


#: Declared on the class (a property where settings decide, which no contextual encoding uses).
CONTEXTUAL = [
    n
    for n in available()
    if isinstance(declared := ENCODINGS[n].capabilities, Capabilities) and declared.contextual_positions
]


@pytest.mark.parametrize("name", CONTEXTUAL)
def test_a_contextual_encoding_holds_as_contextual_saying_the_positions_are_not_read(name):
    result = properties(specimen(name))["relative"]
    assert (result.verdict, result.category, result.value) == ("holds", "contextual", 0.0)
    assert result.reason.startswith("contextual: shifting every given position leaves the logits unchanged")
    assert "made from the content" in result.reason and "not i − j" in result.reason
    assert "the given positions are not read" in result.reason


def test_every_claim_of_cope_is_measured_without_error():
    verdicts = {name: prop.verdict for name, prop in properties(specimen("cope")).items()}
    assert "error" not in verdicts.values()
    assert verdicts["relative"] == "holds" and verdicts["parameters"] == "holds"


def test_a_contextual_encoding_that_also_reads_positions_fails_as_contextual():
    result = relative(_specimen(ReadsPositionsToo), 256)
    assert result.holds is False and result.category == "contextual"
    assert result.value > IDENTITY_TOLERANCE
    assert "also reads the positions it is given" in result.reason


def test_without_the_declaration_the_shift_test_would_call_cope_blind_to_position():
    # why the flag exists: CoPE's logits ignore the given positions, which the categories read as "none"
    assert relative(_specimen(NotDeclaredContextual), 256).category == "none"


def test_sentence_counts_are_the_encodings_counted_positions_of_the_last_query():
    cope = specimen("cope")
    counts = sentence_counts(cope)
    assert counts.words == SAMPLE_SENTENCE
    assert counts.counted.shape == (len(SAMPLE_SENTENCE),) and counts.counted.dtype == torch.float64
    torch.testing.assert_close(counts.token_count, torch.arange(11, 0, -1, dtype=torch.float64))
    # each key adds its gate in (0, 1): the counts fall from the first token to the last, under the
    # token count
    steps = counts.counted[:-1] - counts.counted[1:]
    assert bool((steps > 0).all() and (steps < 1).all())
    assert bool((counts.counted < counts.token_count).all() and (counts.counted > 0).all())
    assert torch.equal(sentence_counts(cope).counted, counts.counted)  # fixed projections: drawn once


def test_sentence_counts_refuse_an_encoding_without_the_view_and_empty_sentences():
    with pytest.raises(TypeError, match="RotaryEncoding gives no counted_positions"):
        sentence_counts(specimen("rope"))
    with pytest.raises(ValueError, match="words must hold at least one token, got none"):
        sentence_counts(specimen("cope"), ())
