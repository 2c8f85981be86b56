"""The decode benchmark's code path on tiny sizes: every cache timed, memory measured, results agree."""

from __future__ import annotations

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
    assert kept["concatenating cache (torch.cat per step)"] == 43


def test_the_peak_memory_of_decoding_is_measured_in_a_subprocess():
    # the subprocess builds the benchmark's own model: a short prefill keeps it quick
    result = decode.memory_case("concatenating cache (torch.cat per step)", 64, steps=2)
    assert result.get("peak_extra_mib", -1) >= 0, result


def test_the_concatenating_baseline_and_the_preallocated_cache_decode_the_same_logits():
    assert decode.check_agreement(n=32, steps=3) == 0.0


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
    monkeypatch.setattr(decode, "_prefilled", lambda model, cache, length: None)
    monkeypatch.setattr(decode, "_decode", lambda model, caches, steps: None)
    result = decode._child({"cache": "any", "length": 8, "steps": 1, "threads": 1})
    assert result["peak_extra_mib"] == 0.0
