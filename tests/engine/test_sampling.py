import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from specem_local.engine.sampling import filtered_probabilities, make_sampler, top_k_ids
from specem_local.settings import EnsembleSettings


def test_greedy_picks_argmax():
    sampler = make_sampler(EnsembleSettings(greedy=True), np.random.default_rng(0))
    assert sampler(np.array([0.1, 3.0, 2.0], dtype=np.float32)) == 1


def test_filters_top_k_top_p_min_p():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    ids, probs = filtered_probabilities(logits, 1.0, top_k=3, top_p=1.0, min_p=0.0)
    assert ids.tolist() == [0, 1, 2]
    ids, _ = filtered_probabilities(logits, 1.0, top_k=0, top_p=0.7, min_p=0.0)
    assert ids.tolist() == [0, 1]
    ids, _ = filtered_probabilities(logits, 1.0, top_k=0, top_p=1.0, min_p=0.4)
    assert ids.tolist() == [0, 1]
    assert probs.sum() == 1.0 or abs(probs.sum() - 1.0) < 1e-9


def test_same_seed_same_samples():
    logits = np.random.default_rng(1).normal(size=1000).astype(np.float32)
    settings = EnsembleSettings(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    first = [make_sampler(settings, np.random.default_rng(7))(logits) for _ in range(1)]
    sampler_a = make_sampler(settings, np.random.default_rng(7))
    sampler_b = make_sampler(settings, np.random.default_rng(7))
    assert [sampler_a(logits) for _ in range(20)] == [sampler_b(logits) for _ in range(20)]
    assert first[0] == make_sampler(settings, np.random.default_rng(7))(logits)


@given(
    vocabulary=st.integers(1, 60_000),
    k=st.integers(1, 120),
    seed=st.integers(0, 2**32 - 1),
    levels=st.sampled_from([0, 3, 50]),  # 0: continuous logits; else that many distinct values (ties)
    masked=st.floats(0.0, 0.99),
)
@settings(max_examples=150, deadline=None)
def test_top_k_ids_are_the_k_largest(vocabulary, k, seed, levels, masked):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=vocabulary).astype(np.float32) * 4
    if levels:
        logits = rng.integers(0, levels, vocabulary).astype(np.float32)
    logits[rng.random(vocabulary) < masked] = -np.inf  # resampling masks end-of-generation tokens
    k = min(k, vocabulary)
    ids = top_k_ids(logits, k)
    assert len(ids) == len(set(ids.tolist())) == k
    np.testing.assert_array_equal(np.sort(logits[ids]), np.sort(logits)[-k:])


def test_top_k_ids_on_a_large_vocabulary_read_a_sample_first():
    logits = np.random.default_rng(3).normal(size=262_144).astype(np.float32)
    ids = top_k_ids(logits, 40)
    assert set(ids.tolist()) == set(np.argsort(logits)[-40:].tolist())


def test_top_k_ids_with_nan_logits_fall_back_to_a_whole_partition():
    logits = np.random.default_rng(4).normal(size=262_144).astype(np.float32)
    logits[::64] = np.nan  # every sampled logit: no threshold holds
    assert len(top_k_ids(logits, 40)) == 40
