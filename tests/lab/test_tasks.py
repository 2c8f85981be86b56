"""The tasks' data: the corpus split and fingerprint, and the algorithmic generators."""

from __future__ import annotations

import torch

from posenc.lab import algorithmic
from posenc.lab.algorithmic import AlgorithmicTask
from posenc.lab.corpus import build_corpus, in_validation
from posenc.lab.language_modelling import LanguageModelling


def test_corpus_split_is_by_path_hash_and_fingerprinted(tmp_path):
    for index in range(40):
        (tmp_path / f"module_{index}.py").write_text(f"x = {index}\n" * (index + 1))
    (tmp_path / "site-packages").mkdir()
    (tmp_path / "site-packages" / "third_party.py").write_text("ignored = True\n")
    corpus = build_corpus(str(tmp_path), 0.25)
    print(corpus.fingerprint)
    assert corpus.fingerprint["files"] == 40  # site-packages left out
    validation = [i for i in range(40) if in_validation(f"module_{i}.py", 0.25)]
    assert corpus.fingerprint["validation_files"] == len(validation) > 0
    assert corpus.train.numel() + corpus.validation.numel() == corpus.fingerprint["bytes"]
    assert build_corpus.__wrapped__(str(tmp_path), 0.25).fingerprint == corpus.fingerprint


def test_language_modelling_batches_predict_each_byte_after_bos(tmp_path):
    for index in range(20):
        (tmp_path / f"m{index}.py").write_text("abcdefghij" * 50)
    task = LanguageModelling(build_corpus(str(tmp_path), 0.3))
    batch = task.train_batch(4, 16, torch.Generator().manual_seed(0))
    assert batch.inputs.shape == batch.targets.shape == (4, 16)
    assert (batch.inputs[:, 0] == 256).all()
    assert torch.equal(batch.inputs[:, 1:], batch.targets[:, :-1])


def _decode(tokens: list[int]) -> list[int]:
    return [t - algorithmic.FIRST_SYMBOL for t in tokens]


def test_addition_examples_hold_the_right_sum():
    generator = torch.Generator().manual_seed(1)
    examples = algorithmic.make_examples("addition", torch.tensor([5, 5, 5]), generator)
    for tokens, answer in zip(examples.tokens.tolist(), examples.answer.tolist(), strict=True):
        plus, sep = tokens.index(algorithmic.PLUS), tokens.index(algorithmic.SEP)
        a, b = _decode(tokens[1:plus]), _decode(tokens[plus + 1 : sep])
        total = [tokens[i] for i in range(len(tokens)) if answer[i]]
        assert total[-1] == algorithmic.EOS
        value = lambda digits: sum(d * 10**i for i, d in enumerate(digits))  # noqa: E731 (least significant first)
        assert value(_decode(total[:-1])) == value(a) + value(b)
        assert len(tokens) == algorithmic.sequence_length("addition", 5)


def test_copy_and_reverse_answers():
    for task, transform in (("copy", lambda x: x), ("reverse", lambda x: x[::-1])):
        examples = algorithmic.make_examples(task, torch.tensor([3, 6]), torch.Generator().manual_seed(2))
        for tokens, answer in zip(examples.tokens.tolist(), examples.answer.tolist(), strict=True):
            sep = tokens.index(algorithmic.SEP)
            answer_tokens = [tokens[i] for i in range(len(tokens)) if answer[i]]
            assert answer_tokens == transform(tokens[1:sep]) + [algorithmic.EOS]


def test_training_batches_mix_lengths_up_to_l_and_pad_after_eos():
    task = AlgorithmicTask("copy")
    batch = task.train_batch(64, 8, torch.Generator().manual_seed(3))
    assert batch.inputs.shape[1] == algorithmic.sequence_length("copy", 8) - 1
    lengths = (batch.inputs != algorithmic.PAD).sum(1)
    assert lengths.min() < lengths.max()
    assert not batch.mask[batch.targets == algorithmic.PAD].any()
