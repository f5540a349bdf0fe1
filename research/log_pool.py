"""A log-linear pool of the sources' beliefs over a few options: the alternative to the
product's linear pool tried for issue 56 and not shipped (docs/choices.md, "A log-linear pool
for a task's weights": ahead on train splits, behind the linear fit on the confirm items).

The linear pool (``options.mixed``) averages the sources' beliefs: a source that knows the task
is diluted by every source at chance, and none can say "the opposite of what that one leans to".
The log-linear pool multiplies them, each raised to its weight: the answer's probabilities are
the softmax of ``sum_s w_s log b_s``. A weight may be large, zero or negative; fitted by
maximum likelihood on labelled items (a conditional logit), with an L2 penalty chosen by
cross-validation on the same items.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

PENALTIES = (0.3, 1.0, 3.0, 10.0, 30.0)  # the L2 penalties cross-validation chooses among
FOLDS = 5  # item i is held out in fold i mod FOLDS
LOG_FLOOR = 1e-6  # a belief below this counts as this: one source's certainty is at most ~14 nats
ROUNDS = 100  # Newton steps at most (a penalised conditional logit converges in a handful)


def log_beliefs(beliefs: Mapping[str, np.ndarray], names: Sequence[str], count: int) -> np.ndarray:
    """The sources' log-beliefs as a (source, option) matrix; a source missing (a member lost)
    is a row of zeros: it says nothing."""
    rows = [np.log(np.maximum(beliefs[name], LOG_FLOOR)) if name in beliefs else np.zeros(count) for name in names]
    return np.stack(rows) if rows else np.zeros((0, count))


def fitted(beliefs: Sequence[Mapping[str, np.ndarray]], answers: Sequence[int]) -> dict[str, float]:
    """The weights fitted on labelled items with the penalty cross-validation chooses."""
    return fitted_log_weights(beliefs, answers, chosen_penalty(beliefs, answers))


def log_mixed(beliefs: Mapping[str, np.ndarray], weights: Mapping[str, float]) -> np.ndarray:
    """The pool's probabilities of the options: the softmax of the weighted sum of the sources'
    log-beliefs (sources without a weight count for nothing; no weights at all: every option
    equally likely)."""
    names = list(beliefs)
    count = len(next(iter(beliefs.values())))
    given = np.array([float(weights.get(name, 0.0)) for name in names])
    return _softmax(given @ log_beliefs(beliefs, names, count))


def fitted_log_weights(
    beliefs: Sequence[Mapping[str, np.ndarray]], answers: Sequence[int], penalty: float
) -> dict[str, float]:
    """The weights under which the pool gives the labelled answers the highest probability, less
    ``penalty`` times their squared sum (Newton's method: the problem is strictly concave, so it
    has one optimum; with no items, every weight is 0)."""
    names = list(beliefs[0]) if beliefs else []
    return dict(zip(names, _newton(_matrices(beliefs, names), answers, penalty, len(names)).tolist()))


def _matrices(beliefs: Sequence[Mapping[str, np.ndarray]], names: Sequence[str]) -> list[np.ndarray]:
    return [log_beliefs(item, names, len(next(iter(item.values())))) for item in beliefs]


def _newton(matrices: Sequence[np.ndarray], answers: Sequence[int], penalty: float, size: int) -> np.ndarray:
    weights = np.zeros(size)
    for _ in range(ROUNDS):
        gradient, hessian = 2 * penalty * weights, 2 * penalty * np.eye(size)
        for matrix, answer in zip(matrices, answers):
            probabilities = _softmax(weights @ matrix)
            expected = matrix @ probabilities
            gradient -= matrix[:, answer] - expected
            hessian += (matrix * probabilities) @ matrix.T - np.outer(expected, expected)
        step = np.linalg.solve(hessian, gradient)
        weights -= step
        if np.abs(step).max(initial=0.0) < 1e-9:
            break
    return weights


def log_likelihood(
    beliefs: Sequence[Mapping[str, np.ndarray]], answers: Sequence[int], weights: Mapping[str, float]
) -> float:
    """How likely the pool with these weights finds the labelled answers (summed log)."""
    return float(sum(np.log(max(log_mixed(item, weights)[answer], 1e-300)) for item, answer in zip(beliefs, answers)))


def chosen_penalty(beliefs: Sequence[Mapping[str, np.ndarray]], answers: Sequence[int]) -> float:
    """The penalty (of ``PENALTIES``) whose fits are likeliest to give held-out labelled answers:
    ``FOLDS``-fold cross-validation on the items themselves (ties: the smaller penalty). Each
    item's log-beliefs are taken once, for every fold and penalty."""
    names = list(beliefs[0]) if beliefs else []
    matrices = _matrices(beliefs, names)

    def held_out(penalty: float) -> float:
        total = 0.0
        for fold in range(FOLDS):
            fit_on = [i for i in range(len(answers)) if i % FOLDS != fold]
            held = [i for i in range(len(answers)) if i % FOLDS == fold]
            if not held or not fit_on:
                continue
            weights = _newton([matrices[i] for i in fit_on], [answers[i] for i in fit_on], penalty, len(names))
            total += sum(float(np.log(max(_softmax(weights @ matrices[i])[answers[i]], 1e-300))) for i in held)
        return total

    scored = [(held_out(penalty), -index) for index, penalty in enumerate(PENALTIES)]
    return PENALTIES[-max(scored)[1]]


def _softmax(values: np.ndarray) -> np.ndarray:
    shifted = np.exp(values - values.max())
    return shifted / shifted.sum()
