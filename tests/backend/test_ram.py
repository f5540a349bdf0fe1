from specem_local.backend.ram import available_memory_bytes, memory_warning, peak_rss_bytes


def test_warning_with_numbers_when_models_exceed_memory():
    message = memory_warning({"big": 3 * 2**30, "small": 2**30}, available=2 * 2**30)
    assert message is not None
    assert "4.00 GiB" in message and "2.00 GiB of memory is available" in message and "big 3.00 GiB" in message


def test_no_warning_when_models_fit():
    assert memory_warning({"a": 100}, available=10**9) is None
    assert memory_warning({"a": 100}, available=None) is None


def test_memory_readings_are_plausible():
    assert available_memory_bytes() > 0
    assert peak_rss_bytes() > 10**6
