"""The decode benchmark's code path on tiny sizes: every cache timed, memory measured, results agree."""

from __future__ import annotations

import pytest

from posenc.bench import decode, memory


def test_every_cache_is_timed_at_each_length(monkeypatch):
    monkeypatch.setattr(decode, "MODEL", decode.MODEL | {"d_model": 32, "n_heads": 2})
    result = decode.run(lengths=(16, 40), steps=3, memory=False)
    assert [(case["length"], case["cache"]) for case in result["cases"]] == [
        (n, name) for n in (16, 40) for name in decode.CACHES
    ]
    for case in result["cases"]:
        assert case["median_ms"] > 0 and case["cache_mib"] > 0
    kept = {case["cache"]: case["cached_tokens"] for case in result["cases"] if case["length"] == 40}
    assert kept["concatenating cache (torch.cat per step)"] == 44  # 40, the untimed first step, 3 timed


def test_the_timed_steps_follow_an_untimed_first_step(monkeypatch):
    # the first step grows RoPE's table and, after a power of two, doubles the cache: it was timed
    # (3.1× the others at 1024 tokens), while the memory run leaves it out
    monkeypatch.setattr(decode, "MODEL", decode.MODEL | {"d_model": 32, "n_heads": 2})
    seen, original = [], decode._decode
    monkeypatch.setattr(
        decode,
        "_decode",
        lambda model, caches, steps: seen.append((caches[0].length, steps)) or original(model, caches, steps),
    )
    decode.time_case("KVCache, grown by doubling", 64, steps=4)
    assert seen == [(64, 1), (65, 4)]


def test_the_capacity_row_holds_more_steps_than_the_default(monkeypatch):
    # it was sized for the default 32 steps: --steps 34 and more overflowed it
    monkeypatch.setattr(decode, "MODEL", decode.MODEL | {"d_model": 32, "n_heads": 2})
    steps = decode.STEPS + 8
    case = decode.time_case("KVCache(capacity=n + steps)", 16, steps=steps)
    assert case["cached_tokens"] == 16 + 1 + steps


def test_the_peak_memory_of_decoding_is_measured_in_a_subprocess():
    # the subprocess builds the benchmark's own model: a short prefill keeps it quick
    result = decode.memory_case("concatenating cache (torch.cat per step)", 64, steps=2)
    assert result.get("peak_extra_mib", -1) >= 0, result


def test_every_cache_decodes_the_logits_of_the_concatenating_baseline():
    assert decode.check_agreement(n=32, steps=3) == 0.0


def test_the_agreement_check_catches_a_cache_that_decodes_otherwise(monkeypatch):
    # it compared one cache of three: a doubling cache that lost its keys went on to be timed
    class Forgetful(decode.KVCache):
        def append(self, keys, values, positions, columns=1):
            super().append(keys, values, positions, columns)
            if self.length > 8:
                self._keys[:, :, :4] = 0

    monkeypatch.setitem(
        decode.CACHES,
        "KVCache, grown by doubling",
        lambda model, n, steps: [Forgetful() for _ in model.blocks],
    )
    with pytest.raises(AssertionError, match="KVCache, grown by doubling decodes other logits"):
        decode.check_agreement(n=32, steps=3)


def test_the_peak_never_reads_below_the_resident_set_it_starts_from(monkeypatch):
    # glibc may return memory between reading the baseline and resetting the high-water mark: a
    # baseline read before the reset then lies above every later peak and the "extra" memory is negative
    proc = {"VmRSS": 1000, "VmHWM": 1000}

    def reset_peak():
        proc["VmRSS"] -= 100  # freed pages returned to the system just before the reset
        proc["VmHWM"] = proc["VmRSS"]

    monkeypatch.setattr(decode, "status_kib", lambda field: proc[field])
    monkeypatch.setattr(memory, "status_kib", lambda field: proc[field])
    monkeypatch.setattr(decode, "reset_peak", reset_peak)
    monkeypatch.setattr(decode, "return_freed_memory", lambda: None)
    monkeypatch.setattr(decode, "_model", lambda: None)
    monkeypatch.setattr(decode, "_prefilled", lambda model, cache, length, steps: None)
    monkeypatch.setattr(decode, "_decode", lambda model, caches, steps: None)
    result = decode._child({"cache": "any", "length": 8, "steps": 1, "threads": 1})
    assert result["peak_extra_mib"] == 0.0
