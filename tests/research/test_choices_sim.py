import itertools

from specem_local.engine.learned import built_in_calibrations, names_in
from specem_research.choices import careful_choices, simulate, size_prior


def _record(**right: bool) -> dict:
    return {"systems": {name: {"correct": ok} for name, ok in right.items()}}


def test_a_careful_user_marks_a_right_answer_only_where_members_disagree():
    members = ["a", "b"]
    records = [_record(a=True, b=False), _record(a=True, b=True), _record(a=False, b=False), _record(a=False, b=True)]
    assert careful_choices(records, members) == [{"a": 1.0, "b": 0.0}, {"b": 1.0, "a": 0.0}]


def test_the_simulation_reaches_the_calibration_and_a_weak_member_is_not_drowned():
    key = next(iter(built_in_calibrations()))
    names = names_in(key)
    prior = size_prior(key)
    anchor = built_in_calibrations()[key].anchor
    strong = max(anchor, key=anchor.get).rsplit(" (", 1)[0]
    assert abs(sum(prior.values())) < 1e-9 and prior[strong] == max(prior.values())  # the largest, here
    records = [_record(**{n: n == strong for n in names})] * 30
    result = simulate(records, names, key, rate=0.25)
    assert result["strong"] == strong and result["choices_to_calibrated"] is not None
    weak = result["weak_after_choices_against_strong"]
    assert all(later > earlier for earlier, later in itertools.pairwise(weak))
